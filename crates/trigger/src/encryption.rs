//! Key rotation as a trigger (docs/trigger.md, "Key rotation"): kube-apiserver publishes on
//! `/metrics`, per apiserver identity, the hash of the encryption configuration it applied
//! and, for KMS v2, the key id it writes with. Read on kube-apiserver v1.36.2:
//!
//! ```text
//! apiserver_encryption_config_controller_last_config_info{apiserver_id_hash="sha256:…",hash="sha256:…"} 1
//! apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds{apiserver_id_hash="sha256:…",
//!     key_id_hash="sha256:…",provider_name="…",transformation_type="to_storage"} 1.79e+09
//! ```
//!
//! `apiserver_id_hash` is `sha256:` and the hex SHA-256 of the apiserver's identity lease name
//! (`apiserver-<hash of its hostname>`), `hash` that of the configuration file's bytes (the
//! series is replaced on every reload, which `--encryption-provider-config-automatic-reload`
//! polls for about once a minute). The write key is the `to_storage` series last used.
//!
//! One scrape answers for one apiserver; each scrape opens a connection of its own so that a
//! Service in front of several is balanced anew. A *generation* is agreed when every live
//! apiserver (by identity lease) last reported the same one; the reconciler compares it with
//! the last one recorded in each encrypted resource's history.

use std::collections::{BTreeMap, BTreeSet};

use http::Method;
use k8s_openapi::api::core::v1::ObjectReference;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use svm_runtime::events::{Event, EventType, Events};

use svm_cluster::{ClusterClient, ClusterError};
use svm_runtime::prometheus::proto::{self as prometheus_proto, Series};
use svm_runtime::prometheus::text as prometheus_text;

use super::metrics::{ResultLabel, TriggerMetrics};

/// The configuration each apiserver applied (`--encryption-provider-config-automatic-reload`).
pub const CONFIG_METRIC: &str = "apiserver_encryption_config_controller_last_config_info";
/// When each KMS v2 key id was last used, per transformation (`to_storage`: writes).
pub const KEY_METRIC: &str = "apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds";

/// When each apiserver last reloaded its encryption configuration (`status="success"`).
pub const RELOAD_METRIC: &str =
    "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds";

/// The families the trigger reads.
const FAMILIES: [&str; 3] = [CONFIG_METRIC, KEY_METRIC, RELOAD_METRIC];

/// What one apiserver encrypts new writes with, as its metrics say.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    /// `sha256:…` of the encryption configuration file applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// KMS v2: `<provider>=sha256:…` of the key id each provider writes with, comma-joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_key_id_hash: Option<String>,
}

impl Generation {
    fn is_empty(&self) -> bool {
        self.config_hash.is_none() && self.write_key_id_hash.is_none()
    }

    /// For people: `configuration sha256:ab12cd34…, KMS v2 write key kms=sha256:…`.
    pub fn describe(&self) -> String {
        let short = |h: &str| h.chars().take(19).collect::<String>();
        let mut parts = Vec::new();
        if let Some(config) = &self.config_hash {
            parts.push(format!("configuration {}", short(config)));
        }
        if let Some(key) = &self.write_key_id_hash {
            parts.push(format!("KMS v2 write key {key}"));
        }
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(", ")
        }
    }
}

/// `sha256:<hex>` of an identity lease name: kube-apiserver's `apiserver_id_hash`.
pub fn apiserver_id_hash(lease_name: &str) -> String {
    let digest = Sha256::digest(lease_name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The samples of [`FAMILIES`] in a `/metrics` answer: Prometheus's protobuf when
/// kube-apiserver answered it (a fifth of the text's bytes, half its CPU: `prometheus_proto`),
/// the text otherwise; `None` when a protobuf body does not decode.
fn samples(content_type: Option<&str>, body: &[u8]) -> Option<Vec<Series>> {
    if content_type.is_some_and(prometheus_proto::is_protobuf) {
        return prometheus_proto::samples(body, &FAMILIES);
    }
    Some(text_samples(&String::from_utf8_lossy(body)))
}

/// The samples of [`FAMILIES`] in a `/metrics` text.
fn text_samples(text: &str) -> Vec<Series> {
    text.lines()
        .filter(|line| FAMILIES.iter().any(|family| line.starts_with(family)))
        .filter_map(prometheus_text::sample)
        .map(|(name, labels, value)| (name.to_string(), labels, value))
        .collect()
}

/// Each apiserver's generation in one `/metrics` text, by `apiserver_id_hash`.
#[cfg(test)]
pub fn parse(text: &str) -> BTreeMap<String, Generation> {
    generations(&text_samples(text))
}

/// Each apiserver's generation in one scrape (one apiserver, normally), by `apiserver_id_hash`.
fn generations(samples: &[Series]) -> BTreeMap<String, Generation> {
    let mut out: BTreeMap<String, Generation> = BTreeMap::new();
    // (apiserver, provider) → (newest to_storage use, key id hash).
    let mut writes: BTreeMap<(String, String), (f64, String)> = BTreeMap::new();
    for (name, labels, value) in samples {
        let value = *value;
        let Some(apiserver) = labels.get("apiserver_id_hash").filter(|a| !a.is_empty()) else {
            continue;
        };
        if name == CONFIG_METRIC && value == 1.0 {
            if let Some(hash) = labels.get("hash") {
                out.entry(apiserver.clone()).or_default().config_hash = Some(hash.clone());
            }
        } else if name == KEY_METRIC
            && labels.get("transformation_type").map(String::as_str) == Some("to_storage")
            && let Some(key) = labels.get("key_id_hash")
        {
            let provider = labels.get("provider_name").cloned().unwrap_or_default();
            let slot = writes
                .entry((apiserver.clone(), provider))
                .or_insert((f64::MIN, String::new()));
            if value > slot.0 {
                *slot = (value, key.clone());
            }
        }
    }
    for ((apiserver, provider), (_, key)) in writes {
        let entry = out.entry(apiserver).or_default();
        let joined = format!("{provider}={key}");
        entry.write_key_id_hash = Some(match entry.write_key_id_hash.take() {
            Some(earlier) => format!("{earlier},{joined}"),
            None => joined,
        });
    }
    out
}

/// When each apiserver last reloaded its encryption configuration successfully, in one
/// `/metrics` text.
#[cfg(test)]
pub fn parse_reloads(text: &str) -> BTreeMap<String, f64> {
    reloads(&text_samples(text))
}

/// When each apiserver last reloaded its encryption configuration successfully (Unix seconds),
/// by `apiserver_id_hash`.
fn reloads(samples: &[Series]) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|(name, labels, _)| {
            name == RELOAD_METRIC && labels.get("status").map(String::as_str) == Some("success")
        })
        .filter_map(|(_, labels, value)| Some((labels.get("apiserver_id_hash")?.clone(), *value)))
        .collect()
}

/// A generation every live apiserver applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agreed {
    /// The generation.
    pub generation: Generation,
    /// When the cluster changed to it, when this term saw another one agreed before.
    pub changed_at: Option<jiff::Timestamp>,
}

/// Why no generation is agreed yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Live apiservers not heard from yet (their lease names).
    Unreported(Vec<String>),
    /// Apiservers report different generations (a reload still rolling out).
    Disagree(usize),
    /// No apiserver publishes an encryption generation.
    Nothing,
}

/// The generation every live apiserver last reported. `live`: identity lease names, `None`
/// when the lease watch has not listed (then the apiservers that answered are the set).
pub fn agreed(
    reports: &BTreeMap<String, Generation>,
    live: Option<&[String]>,
) -> Result<Generation, Waiting> {
    let considered: Vec<&Generation> = match live {
        Some(names) if !names.is_empty() => {
            let missing: Vec<String> = names
                .iter()
                .filter(|n| !reports.contains_key(&apiserver_id_hash(n)))
                .cloned()
                .collect();
            if !missing.is_empty() {
                return Err(Waiting::Unreported(missing));
            }
            names
                .iter()
                .filter_map(|n| reports.get(&apiserver_id_hash(n)))
                .collect()
        }
        _ => reports.values().collect(),
    };
    let distinct: BTreeSet<&Generation> = considered.into_iter().collect();
    match distinct.len() {
        0 => Err(Waiting::Nothing),
        1 => distinct
            .into_iter()
            .next()
            .filter(|g| !g.is_empty())
            .cloned()
            .ok_or(Waiting::Nothing),
        n => Err(Waiting::Disagree(n)),
    }
}

/// What a scrape came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scrape {
    /// Read, with an encryption generation in it.
    Read,
    /// Read, but the apiserver publishes none (no `--encryption-provider-config`, or no
    /// automatic reload and no KMS v2).
    Absent,
    /// 401/403: the `get` on the non-resource URL `/metrics` is not granted.
    Forbidden,
    /// Any other failure (network, 5xx): tried again next poll.
    Failed,
}

impl Scrape {
    fn label(self) -> &'static str {
        match self {
            Scrape::Read => "read",
            Scrape::Absent => "absent",
            Scrape::Forbidden => "forbidden",
            Scrape::Failed => "failed",
        }
    }
}

/// Polls kube-apiserver's `/metrics` and keeps what each apiserver last reported.
pub struct EncryptionObserver {
    cluster: ClusterClient,
    metrics: TriggerMetrics,
    events: Events,
    /// Where the Warning Event goes: the StorageState of the first encrypted resource.
    event_object: String,
    reports: BTreeMap<String, Generation>,
    /// For each report, the identity lease's holder (the apiserver process) when it was read:
    /// a restarted apiserver keeps its lease name, and its report from before says nothing
    /// of what the new process applies.
    holders: BTreeMap<String, String>,
    /// Apiservers that answered the last scrape.
    answered: Vec<String>,
    /// When each apiserver last reloaded its configuration, as it says.
    reloads: BTreeMap<String, f64>,
    /// The last poll that found a generation agreed, and which.
    last_agreed: Option<(jiff::Timestamp, Generation)>,
    /// The last scrape's outcome that was told (logged, and for a refusal an Event): each
    /// outage is told once, not once per poll.
    told: Option<Scrape>,
    /// Why the last agreement was not reached, as logged.
    waiting_told: Option<Waiting>,
}

impl std::fmt::Debug for EncryptionObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptionObserver")
            .field("reports", &self.reports)
            .finish_non_exhaustive()
    }
}

impl EncryptionObserver {
    /// An observer of `cluster`'s encryption generations; its Warning Event goes to the StorageState `event_object`.
    pub fn new(cluster: ClusterClient, metrics: TriggerMetrics, event_object: String) -> Self {
        Self {
            events: Events::new(cluster.kube().clone(), None),
            cluster,
            metrics,
            event_object,
            reports: BTreeMap::new(),
            holders: BTreeMap::new(),
            answered: Vec::new(),
            reloads: BTreeMap::new(),
            last_agreed: None,
            told: None,
            waiting_told: None,
        }
    }

    /// One poll: scrape, then the generation every live apiserver agrees on, if any. `live`:
    /// each live identity lease's name and holder, `None` while the lease watch has not listed.
    pub async fn poll(&mut self, live: Option<&[(String, String)]>) -> Option<Agreed> {
        let scrape = self.scrape().await;
        self.metrics
            .encryption_scrapes
            .get_or_create(&ResultLabel {
                result: scrape.label().into(),
            })
            .inc();
        self.tell(scrape).await;
        // What earlier reads reported is no sight of now: a refused or failed read agrees on
        // nothing (and the gauge the alert reads says so).
        if scrape != Scrape::Read {
            self.metrics.encryption_observed.set(0);
            return None;
        }
        let live = live.filter(|l| !l.is_empty());
        if let Some(leases) = live {
            self.keep_current(leases);
        }
        let names: Option<Vec<String>> = live.map(|l| l.iter().map(|(n, _)| n.clone()).collect());
        match agreed(&self.reports, names.as_deref()) {
            Ok(generation) => {
                self.metrics.encryption_observed.set(1);
                self.waiting_told = None;
                let changed_at = self.changed_at(&generation);
                self.last_agreed = Some((jiff::Timestamp::now(), generation.clone()));
                Some(Agreed {
                    generation,
                    changed_at,
                })
            }
            Err(waiting) => {
                self.metrics.encryption_observed.set(0);
                if scrape == Scrape::Read && self.waiting_told.as_ref() != Some(&waiting) {
                    tracing::info!(
                        ?waiting,
                        "no encryption generation agreed by every apiserver yet"
                    );
                    self.waiting_told = Some(waiting);
                }
                None
            }
        }
    }

    /// When the cluster changed to `generation`, for the detection-lag metric: the latest
    /// reload kube-apiserver reports (a KMS v2 key change has none), else the last poll that
    /// found another generation agreed (the change came after it). `None`: this term never
    /// agreed on another one (a first sight is no change).
    fn changed_at(&self, generation: &Generation) -> Option<jiff::Timestamp> {
        let (polled, before) = self.last_agreed.as_ref()?;
        if before == generation {
            return None;
        }
        let reloaded = self.reloads.values().copied().fold(f64::MIN, f64::max);
        let reloaded = jiff::Timestamp::from_microsecond((reloaded * 1e6) as i64).ok();
        Some(reloaded.filter(|r| r > polled).unwrap_or(*polled))
    }

    /// Drops the reports of apiservers that are gone, or restarted since they answered:
    /// neither says anything about what is written now.
    fn keep_current(&mut self, leases: &[(String, String)]) {
        let current: BTreeMap<String, &str> = leases
            .iter()
            .map(|(name, holder)| (apiserver_id_hash(name), holder.as_str()))
            .collect();
        for id in std::mem::take(&mut self.answered) {
            if let Some(holder) = current.get(&id) {
                self.holders.insert(id, holder.to_string());
            }
        }
        self.reports.retain(|id, _| {
            current.get(id).is_some_and(|holder| {
                self.holders
                    .get(id)
                    .is_none_or(|answered| answered == holder)
            })
        });
        self.holders.retain(|id, _| self.reports.contains_key(id));
        self.reloads.retain(|id, _| self.reports.contains_key(id));
    }

    async fn scrape(&mut self) -> Scrape {
        let answer = match self.cluster.on_new_connection() {
            Ok(client) => {
                client
                    .request(Method::GET, "/metrics", prometheus_proto::ACCEPT, None)
                    .await
            }
            Err(err) => Err(err),
        };
        match answer {
            Ok(answer) => {
                let content_type = answer
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok());
                let Some(samples) = samples(content_type, &answer.body) else {
                    if self.told != Some(Scrape::Failed) {
                        tracing::warn!(
                            "kube-apiserver's /metrics in protobuf did not decode; retrying every poll"
                        );
                    }
                    return Scrape::Failed;
                };
                let found = generations(&samples);
                if found.is_empty() {
                    return Scrape::Absent;
                }
                self.answered = found.keys().cloned().collect();
                self.reports.extend(found);
                self.reloads.extend(reloads(&samples));
                Scrape::Read
            }
            Err(err) if refused(&err) => Scrape::Forbidden,
            Err(err) => {
                if self.told != Some(Scrape::Failed) {
                    tracing::warn!(error = %err, "reading kube-apiserver's /metrics failed; retrying every poll");
                }
                Scrape::Failed
            }
        }
    }

    /// Says once per change of outcome what the trigger can or cannot see.
    async fn tell(&mut self, scrape: Scrape) {
        if self.told == Some(scrape) {
            return;
        }
        match scrape {
            Scrape::Read if self.told.is_some() => {
                tracing::info!("kube-apiserver's encryption generation is readable again");
            }
            Scrape::Read | Scrape::Failed => {}
            Scrape::Absent => tracing::warn!(
                "kube-apiserver's /metrics has no {CONFIG_METRIC} nor KMS v2 {KEY_METRIC}: \
                 key rotations are not seen (does it run --encryption-provider-config with \
                 --encryption-provider-config-automatic-reload?)"
            ),
            Scrape::Forbidden => {
                tracing::warn!(
                    "reading kube-apiserver's /metrics is forbidden: key rotations are not \
                     seen until `get` on the non-resource URL /metrics is granted \
                     (deploy/base/rbac-trigger.yaml)"
                );
                self.warn_forbidden().await;
            }
        }
        self.told = Some(scrape);
    }

    /// A Warning Event for people: once per outage.
    async fn warn_forbidden(&self) {
        let reference = ObjectReference {
            api_version: Some(format!("{}/v1", svm_api::GROUP)),
            kind: Some(svm_api::storagestate::KIND.into()),
            name: Some(self.event_object.clone()),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "EncryptionNotObserved".into(),
            note: Some(
                "kube-apiserver refused GET /metrics (403): encryption key rotations are not \
                 seen and start no migration. Grant `get` on the non-resource URL /metrics \
                 (deploy/base/rbac-trigger.yaml), or create a migration by hand after a rotation."
                    .into(),
            ),
            action: "ObserveEncryption".into(),
            secondary: None,
        };
        self.events.publish(event, &reference).await;
    }
}

/// A refusal that a grant would lift: 401/403 from an apiserver that says it is ready (one
/// still starting refuses until its authorizer synced: that is retried as a failure).
fn refused(err: &ClusterError) -> bool {
    matches!(err, ClusterError::Api { .. }) && err.is_refusal()
}

#[cfg(test)]
mod tests;

//! `SVM_BENCH_REAL_RUNS=writes`: what each way of writing an object back unchanged costs
//! kube-apiserver — its CPU seconds per 1 000 objects (`/proc/<pid>/stat`) — for a custom
//! resource (its CRD's storage version moved before every pass, so every write re-encodes the
//! object: checked in etcd after each pass) and for ConfigMaps (built-in; nothing changes their
//! stored bytes here, so kube-apiserver does all the work but the etcd write). Every pass
//! writes every object once, 16 at a time, from this process, with the resourceVersion
//! precondition; the strategies alternate (A, B, C, …, A, B, C, …) against drift.

use std::time::Instant;

use futures::StreamExt;
use http::Request;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

use super::{Bench, Blobs, cpu_seconds};

/// Writes in flight in a pass.
const CONCURRENCY: usize = 16;
/// Passes of each strategy (alternated).
const ROUNDS: usize = 2;

/// One way of writing an object back unchanged, with its resourceVersion as the precondition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// `{"metadata":{"resourceVersion":"<rv>"}}` as a JSON merge patch (ours before).
    Merge,
    /// The same with `?fieldValidation=Ignore` (no strict decoding of the patched object).
    MergeIgnore,
    /// `[{"op":"test","path":"/metadata/resourceVersion","value":"<rv>"}]` (a stale one is a
    /// 422, not a 409).
    JsonPatch,
    /// `[{"op":"replace","path":"/metadata/resourceVersion","value":"<rv>"}]`: the patched
    /// object carries the listed resourceVersion, so a stale one is a 409 as with the merge patch.
    JsonPatchReplace,
    /// A server-side apply of `apiVersion`, `kind` and `metadata.{name,namespace,resourceVersion}`.
    Apply,
    /// GET the object (JSON), PUT it back as read.
    GetPut,
    /// GET the object in protobuf, PUT the same bytes back (built-in kinds only).
    GetPutProtobuf,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Merge => "merge patch",
            Strategy::MergeIgnore => "merge patch, fieldValidation=Ignore",
            Strategy::JsonPatch => "JSON patch (test rv)",
            Strategy::JsonPatchReplace => "JSON patch (replace rv)",
            Strategy::Apply => "apply (rv set)",
            Strategy::GetPut => "GET + PUT (JSON)",
            Strategy::GetPutProtobuf => "GET + PUT (protobuf)",
        }
    }
}

/// What a pass of one strategy did.
struct Pass {
    kind: &'static str,
    kib: usize,
    strategy: Strategy,
    objects: usize,
    seconds: f64,
    kas_cpu: f64,
    /// Answers with a new resourceVersion (the object was written to etcd).
    rewritten: usize,
    /// Answers refusing the write (409, or the JSON patch's 422).
    refused: usize,
    /// Objects stored in the expected version afterwards (custom resources only).
    in_etcd: Option<usize>,
}

const PATH_CM: &str = "bench-writes";
const JSON_ONLY: &str = "application/json";
const METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// An object to write: its URL and listed resourceVersion.
struct Item {
    path: String,
    name: String,
    rv: String,
}

/// A resource the passes write.
struct Subject {
    kind: &'static str,
    api_version: String,
    k8s_kind: String,
    collection: String,
    namespace: String,
}

impl Bench {
    /// The write-strategy table: `kibs` object sizes, `n` objects each (a quarter at 100 KiB).
    pub(crate) async fn writes(&self, kibs: &[usize], n: usize) {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        eprintln!("writes: load average at start: {load}");
        let mut passes = Vec::new();
        for &kib in kibs {
            let objects = if kib >= 100 { (n / 4).max(1) } else { n };
            let mut blobs = self.install("write", kib, objects).await;
            let custom = Subject {
                kind: "custom",
                api_version: format!("{}/v1", super::GROUP),
                k8s_kind: blobs.kind.clone(),
                collection: format!(
                    "/apis/{}/v1/namespaces/{}/{}",
                    super::GROUP,
                    super::NAMESPACE,
                    blobs.plural
                ),
                namespace: super::NAMESPACE.into(),
            };
            let strategies = [
                Strategy::Merge,
                Strategy::MergeIgnore,
                Strategy::JsonPatch,
                Strategy::JsonPatchReplace,
                Strategy::Apply,
                Strategy::GetPut,
            ];
            for _ in 0..ROUNDS {
                for strategy in strategies {
                    self.flip(&mut blobs);
                    let mut pass = self.pass(&custom, kib, strategy).await;
                    pass.in_etcd = Some(self.stored_in(&blobs).await);
                    passes.push(pass);
                }
            }
            let namespace = format!("{PATH_CM}-{kib}k");
            self.plane
                .kubectl()
                .ok(&["create", "namespace", &namespace]);
            self.create_configmaps(&namespace, kib, objects).await;
            let configmaps = Subject {
                kind: "configmaps",
                api_version: "v1".into(),
                k8s_kind: "ConfigMap".into(),
                collection: format!("/api/v1/namespaces/{namespace}/configmaps"),
                namespace,
            };
            for _ in 0..ROUNDS {
                for strategy in strategies.iter().copied().chain([Strategy::GetPutProtobuf]) {
                    passes.push(self.pass(&configmaps, kib, strategy).await);
                }
            }
            print(&passes);
        }
        if let Some(managers) = self.managers_after_apply().await {
            println!("\nmanagedFields of an object after the apply passes: {managers}");
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        eprintln!("writes: load average at end: {load}");
    }

    async fn create_configmaps(&self, namespace: &str, kib: usize, objects: usize) {
        let payload = "x".repeat(kib * 1024);
        let path = format!("/api/v1/namespaces/{namespace}/configmaps");
        let failed = futures::stream::iter(0..objects)
            .map(|i| {
                let body = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:07}")},
                    "data": {"payload": payload},
                });
                let path = path.clone();
                async move {
                    self.send(
                        "POST",
                        &path,
                        JSON_ONLY,
                        Some(("application/json", body.to_string().into_bytes())),
                    )
                    .await
                    .0
                }
            })
            .buffer_unordered(32)
            .filter(|code| futures::future::ready(*code != 201))
            .count()
            .await;
        assert_eq!(failed, 0, "creates failed");
    }

    /// One request; its status code and body.
    async fn send(
        &self,
        method: &str,
        path: &str,
        accept: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> (u16, bytes::Bytes) {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("Accept", accept);
        let body = match body {
            Some((content_type, bytes)) => {
                builder = builder.header("Content-Type", content_type);
                kube::client::Body::from(bytes)
            }
            None => kube::client::Body::empty(),
        };
        let response = self
            .client
            .send(builder.body(body).expect("request"))
            .await
            .expect("an answer");
        let code = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        (code, body)
    }

    /// Every object of `subject` with its resourceVersion (one metadata-only LIST).
    async fn items(&self, subject: &Subject) -> Vec<Item> {
        let (code, body) = self
            .send(
                "GET",
                &subject.collection,
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                None,
            )
            .await;
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        let list: Value = serde_json::from_slice(&body).expect("a list");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                Item {
                    path: format!("{}/{name}", subject.collection),
                    name: name.to_string(),
                    rv: item["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                }
            })
            .collect()
    }

    async fn pass(&self, subject: &Subject, kib: usize, strategy: Strategy) -> Pass {
        let items = self.items(subject).await;
        let cpu = cpu_seconds(self.kas_pid);
        let started = Instant::now();
        let outcomes: Vec<Outcome> = futures::stream::iter(&items)
            .map(|item| self.write(subject, item, strategy))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let seconds = started.elapsed().as_secs_f64();
        let kas_cpu = cpu_seconds(self.kas_pid) - cpu;
        let failed: Vec<&String> = outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Failed(why) => Some(why),
                _ => None,
            })
            .take(3)
            .collect();
        assert!(failed.is_empty(), "{}: {failed:?}", strategy.name());
        Pass {
            kind: subject.kind,
            kib,
            strategy,
            objects: items.len(),
            seconds,
            kas_cpu,
            rewritten: outcomes
                .iter()
                .filter(|o| **o == Outcome::Rewritten)
                .count(),
            refused: outcomes.iter().filter(|o| **o == Outcome::Refused).count(),
            in_etcd: None,
        }
    }

    async fn write(&self, subject: &Subject, item: &Item, strategy: Strategy) -> Outcome {
        let rv = &item.rv;
        let (code, body) = match strategy {
            Strategy::Merge | Strategy::MergeIgnore => {
                let path = if strategy == Strategy::MergeIgnore {
                    format!("{}?fieldValidation=Ignore", item.path)
                } else {
                    item.path.clone()
                };
                let patch = json!({"metadata": {"resourceVersion": rv}}).to_string();
                self.send(
                    "PATCH",
                    &path,
                    METADATA,
                    Some(("application/merge-patch+json", patch.into_bytes())),
                )
                .await
            }
            Strategy::JsonPatch | Strategy::JsonPatchReplace => {
                let op = if strategy == Strategy::JsonPatch {
                    "test"
                } else {
                    "replace"
                };
                let patch = json!([{"op": op, "path": "/metadata/resourceVersion", "value": rv}])
                    .to_string();
                self.send(
                    "PATCH",
                    &item.path,
                    METADATA,
                    Some(("application/json-patch+json", patch.into_bytes())),
                )
                .await
            }
            Strategy::Apply => {
                let patch = json!({
                    "apiVersion": subject.api_version, "kind": subject.k8s_kind,
                    "metadata": {"name": item.name, "namespace": subject.namespace, "resourceVersion": rv},
                })
                .to_string();
                let path = format!("{}?fieldManager=svm-bench-no-op", item.path);
                self.send(
                    "PATCH",
                    &path,
                    METADATA,
                    Some(("application/apply-patch+yaml", patch.into_bytes())),
                )
                .await
            }
            Strategy::GetPut | Strategy::GetPutProtobuf => {
                let (accept, content_type) = if strategy == Strategy::GetPut {
                    (JSON_ONLY, "application/json")
                } else {
                    (PROTOBUF, PROTOBUF)
                };
                let (code, current) = self.send("GET", &item.path, accept, None).await;
                if code != 200 {
                    return Outcome::Failed(format!("GET {code}"));
                }
                self.send(
                    "PUT",
                    &item.path,
                    METADATA,
                    Some((content_type, current.to_vec())),
                )
                .await
            }
        };
        match code {
            200 => {
                let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
                if answer["metadata"]["resourceVersion"].as_str() == Some(rv.as_str()) {
                    Outcome::Unchanged
                } else {
                    Outcome::Rewritten
                }
            }
            409 | 422 => Outcome::Refused,
            _ => Outcome::Failed(format!("{code} {}", String::from_utf8_lossy(&body))),
        }
    }

    /// How many of `blobs`' objects etcd holds in the CRD's current storage version.
    async fn stored_in(&self, blobs: &Blobs) -> usize {
        let version = if blobs.stored_in_v2 { "v2" } else { "v1" };
        let want = format!("{}/{version}", super::GROUP);
        let prefix = format!(
            "/registry/{}/{}/{}/",
            super::GROUP,
            blobs.plural,
            super::NAMESPACE
        );
        self.plane
            .etcd_get_prefix(&prefix)
            .await
            .iter()
            .filter(|(_, value)| {
                serde_json::from_slice::<Value>(value)
                    .is_ok_and(|object| object["apiVersion"] == want.as_str())
            })
            .count()
    }

    /// The managers in the managedFields of the first ConfigMap of 1 KiB, if any.
    async fn managers_after_apply(&self) -> Option<String> {
        let path = format!("/api/v1/namespaces/{PATH_CM}-1k/configmaps/cm-0000000");
        let (code, body) = self.send("GET", &path, JSON_ONLY, None).await;
        if code != 200 {
            return None;
        }
        let object: Value = serde_json::from_slice(&body).ok()?;
        Some(object["metadata"]["managedFields"].to_string())
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Rewritten,
    Unchanged,
    Refused,
    Failed(String),
}

fn print(passes: &[Pass]) {
    println!(
        "\nNo-op writes on the real kube-apiserver ({CONCURRENCY} at a time, each pass every object once)\n"
    );
    println!(
        "| resource | KiB | strategy | N | obj/s | kas CPU s/1000 | rewritten | refused | re-encoded in etcd |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in passes {
        let n = p.objects as f64;
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.2} | {} | {} | {} |",
            p.kind,
            p.kib,
            p.strategy.name(),
            p.objects,
            n / p.seconds,
            p.kas_cpu / n * 1000.0,
            p.rewritten,
            p.refused,
            p.in_etcd
                .map_or_else(|| "—".into(), |k| format!("{k}/{}", p.objects)),
        );
    }
}

//! The DataPlaneRollout controller (alpha; `--enable-data-plane-rollouts`): a storage data
//! plane's DaemonSet upgraded one node at a time, each node gated on every volume with a
//! replica there keeping enough healthy replicas on other nodes (docs/data-plane.md).
//!
//! Each pass over a rollout reads it as stored now and the cluster ([`cluster`]), decides in a
//! pure function ([`plan`]) with the replica guards ([`guards`]), writes the status — the
//! intent: which node is cordoned by us, which pod is evicted — and only then, the term found
//! to last, sends the cluster writes (a cordon with our claim, an eviction through the
//! Eviction API with the pod's uid, a release). A crash anywhere resumes where it stopped: the
//! status says what was meant, the cluster what was done, and the planner mends the
//! difference; a pod is evicted at most once, since an accepted eviction leaves it deleting.
//! Passes run on every change of a rollout and every `--data-plane-resync-interval`, on the
//! leader only.

mod cluster;
pub mod guards;
#[cfg(feature = "test-hooks")]
mod hooks;
#[cfg(not(feature = "test-hooks"))]
#[path = "hooks_off.rs"]
mod hooks;
mod metrics;
pub mod plan;
pub mod read;
mod status;
#[cfg(test)]
mod testing;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use svm_api::dataplane::{DataPlaneRollout, DataPlaneRolloutStrategy, KIND, SUCCEEDED};
use svm_cluster::ClusterClient;
use svm_registry::{Guarded, Update};
use svm_runtime::events::{Event, EventType, Events};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use cluster::{Evicted, Observation, ObserveError};
use hooks::{Hooks, Step};
pub use metrics::DataPlaneMetrics;
use plan::{Action, Plan};
use status::Change;

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often every rollout is looked at again without a change of its own (nodes, pods
    /// and replicas change without telling it).
    pub resync: Duration,
}

/// The DataPlaneRollout controller.
pub struct Controller {
    store: Guarded<DataPlaneRolloutStrategy>,
    cluster: ClusterClient,
    events: Events,
    metrics: DataPlaneMetrics,
    settings: Settings,
}

/// How often a settled rollout is looked at again when nothing of its own changed: a new
/// DaemonSet revision after it succeeded is seen within this.
const SETTLED_RESYNC: Duration = Duration::from_secs(60);

/// Succeeded for its current spec: nothing moves until the DaemonSet or the rollout does. (A
/// failed one stays at the resync: a person mending its node is seen at once.)
fn is_settled(rollout: &DataPlaneRollout) -> bool {
    let status = &rollout.status;
    status.observed_generation == rollout.metadata.generation
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == SUCCEEDED && c.status == "True")
}

/// The rollouts a tick of the resync passes over: those under way, and the settled ones
/// not passed over for [`SETTLED_RESYNC`].
fn due_on_tick(
    known: &BTreeMap<String, DataPlaneRollout>,
    last_pass: &BTreeMap<String, Instant>,
) -> Vec<String> {
    known
        .iter()
        .filter(|(key, rollout)| {
            !is_settled(rollout)
                || last_pass
                    .get(*key)
                    .is_none_or(|t| t.elapsed() >= SETTLED_RESYNC)
        })
        .map(|(key, _)| key.clone())
        .collect()
}

/// A rollout's `namespace/name`: its key here and what its claims on Nodes say.
fn key_of(rollout: &DataPlaneRollout) -> String {
    format!(
        "{}/{}",
        rollout.metadata.namespace.as_deref().unwrap_or_default(),
        rollout.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Why a pass stopped before its end.
enum Stop {
    /// The term is over: nothing more is written.
    TermOver,
    /// A test build's hook halted the rollout ([`hooks`]).
    Halted,
}

impl Controller {
    /// A controller of the rollouts in `store`, acting on `cluster`.
    pub fn new(
        store: Guarded<DataPlaneRolloutStrategy>,
        cluster: ClusterClient,
        metrics: DataPlaneMetrics,
        settings: Settings,
        instance: Option<String>,
    ) -> Self {
        let events = Events::new(cluster.kube().clone(), instance);
        Controller {
            store,
            cluster,
            events,
            metrics,
            settings,
        }
    }

    /// Runs until `cancel` fires: a rollout is passed over when it changes (its own write
    /// included: the pass after it sees what it did), and on every tick of the resync while
    /// it is under way; a settled one ([`is_settled`]) once every [`SETTLED_RESYNC`].
    pub async fn run(self, cancel: CancellationToken) {
        let mut hooks = Hooks::from_env();
        let (tx, mut updates) = mpsc::channel(64);
        // A relist (the watch's safety net) makes every rollout due: as often as settled ones.
        let feed = self.store.list_and_watch(SETTLED_RESYNC, tx, |u| u);
        let mut known: BTreeMap<String, DataPlaneRollout> = BTreeMap::new();
        let mut last_pass: BTreeMap<String, Instant> = BTreeMap::new();
        let mut tick = tokio::time::interval(self.settings.resync);
        loop {
            let due: Vec<String> = tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => due_on_tick(&known, &last_pass),
                update = updates.recv() => match update {
                    Some(update) => self.apply(&mut known, update),
                    None => break,
                },
            };
            let live: BTreeSet<String> = known.keys().cloned().collect();
            last_pass.retain(|key, _| live.contains(key));
            for key in due.iter().filter(|k| live.contains(*k)) {
                if hooks.is_halted(key) {
                    continue;
                }
                if cancel.is_cancelled() {
                    break;
                }
                last_pass.insert(key.clone(), Instant::now());
                let span = tracing::info_span!("data_plane_rollout", rollout = %key);
                let pass = self
                    .reconcile(key, &live, &mut hooks)
                    .instrument(span)
                    .await;
                if let Err(Stop::TermOver) = pass {
                    break;
                }
            }
        }
        feed.abort();
    }

    /// Applies a watch update; returns the rollouts it changed (every one on a relist).
    fn apply(
        &self,
        known: &mut BTreeMap<String, DataPlaneRollout>,
        update: Update<DataPlaneRollout>,
    ) -> Vec<String> {
        match update {
            Update::Applied(rollout) => {
                let key = key_of(&rollout);
                known.insert(key.clone(), rollout);
                vec![key]
            }
            Update::Deleted(rollout) => {
                let (namespace, name) = names(&rollout);
                self.metrics.forget(namespace, name);
                known.remove(&key_of(&rollout));
                Vec::new()
            }
            Update::Relisted(all) => {
                *known = all.into_iter().map(|r| (key_of(&r), r)).collect();
                known.keys().cloned().collect()
            }
            Update::Failed(message) => {
                tracing::info!(%message, "listing DataPlaneRollouts failed; retrying");
                Vec::new()
            }
        }
    }

    /// One pass over one rollout: read, plan, write the status, act.
    async fn reconcile(
        &self,
        key: &str,
        live: &BTreeSet<String>,
        hooks: &mut Hooks,
    ) -> Result<(), Stop> {
        let Some(rollout) = self.current(key).await else {
            return Ok(());
        };
        if rollout.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let observation = match cluster::observe(&self.cluster, &rollout, live).await {
            Ok(observation) => observation,
            Err(ObserveError::Refused(refusal)) => {
                self.refuse(rollout, &refusal).await;
                return Ok(());
            }
            Err(ObserveError::Cluster(err)) => {
                tracing::info!(error = %err, "reading the cluster deferred");
                return Ok(());
            }
        };
        let now = jiff::Timestamp::now();
        let plan = plan::plan(&rollout, &observation.observed, now);
        let next = status::summarize(
            &rollout,
            &observation.observed.revision,
            plan.nodes.clone(),
            now,
        );
        let changes = status::changes(&rollout.status.nodes, &next.nodes);
        let Some(stored) = self.write_status(rollout, next).await else {
            return Ok(());
        };
        self.announce(&stored, &observation, &changes).await;
        self.perform(key, stored, &observation, plan, hooks).await
    }

    /// The rollout as stored now (not as the watch last brought it): the status this pass
    /// builds on must be the latest one.
    async fn current(&self, key: &str) -> Option<DataPlaneRollout> {
        let (namespace, name) = key.split_once('/')?;
        match self.store.get((namespace, name)).await {
            Ok(found) => found,
            Err(err) => {
                tracing::info!(error = %err, "reading the rollout deferred");
                None
            }
        }
    }

    /// A rollout the cluster refuses: Failed with the reason, once; nothing else touched.
    async fn refuse(&self, rollout: DataPlaneRollout, refusal: &cluster::Refused) {
        let status = status::refused(&rollout, refusal, jiff::Timestamp::now());
        if status == rollout.status {
            return;
        }
        tracing::warn!(reason = refusal.reason, message = %refusal.message, "rollout refused");
        if let Some(stored) = self.write_status(rollout, status).await {
            let event = event(true, refusal.reason, &refusal.message);
            self.events
                .publish(event, &rollout_reference(&stored))
                .await;
        }
    }

    /// `status` written when it differs from the stored one, fenced, on the stored
    /// resourceVersion; the rollout as stored after, `None` (the pass deferred) on failure.
    async fn write_status(
        &self,
        rollout: DataPlaneRollout,
        status: svm_api::dataplane::DataPlaneRolloutStatus,
    ) -> Option<DataPlaneRollout> {
        let (namespace, name) = names(&rollout);
        self.metrics.observe(namespace, name, &status);
        if status == rollout.status {
            return Some(rollout);
        }
        let mut updated = rollout;
        updated.status = status;
        match self.store.update_status(updated).await {
            Ok(written) => Some(written),
            Err(err) => {
                tracing::info!(error = %err, "writing the status deferred");
                None
            }
        }
    }

    /// An Event on the rollout and on the Node for each node's change.
    async fn announce(
        &self,
        rollout: &DataPlaneRollout,
        observation: &Observation,
        changes: &[Change],
    ) {
        let regarding = rollout_reference(rollout);
        for change in changes {
            if change.reason == "Upgraded" || change.reason == "Recovered" {
                self.metrics.nodes_upgraded.inc();
            }
            let uid = observation
                .observed
                .nodes
                .iter()
                .find(|n| n.name == change.node)
                .map(|n| n.uid.clone());
            let node = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(change.node.clone()),
                uid,
                ..Default::default()
            };
            let secondary = Some(observation.daemon_set.clone());
            for reference in [&regarding, &node] {
                let mut event = event(change.warning, &change.reason, &change.message);
                event.secondary = secondary.clone();
                self.events.publish(event, reference).await;
            }
        }
    }

    /// The plan's writes, in order, each after the term was found to last; a cordon or release
    /// that fails stops the rest. A budget's refusal is written to the node's status (what
    /// holds it, named).
    async fn perform(
        &self,
        key: &str,
        rollout: DataPlaneRollout,
        observation: &Observation,
        plan: Plan,
        hooks: &mut Hooks,
    ) -> Result<(), Stop> {
        let mut refusals: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for action in plan.actions {
            self.leading().await?;
            let done = match &action {
                Action::Cordon(node) => self.cordon(key, node).await,
                Action::Release { node, uncordon } => self.release(key, node, *uncordon).await,
                Action::Evict {
                    node,
                    namespace,
                    name,
                    uid,
                } => {
                    let data_plane = observation.observed.pods.iter().any(|p| &p.uid == uid);
                    match self.evict(namespace, name, uid, data_plane).await {
                        Some(Evicted::Refused(blocker)) => {
                            refusals.entry(node.clone()).or_default().push(blocker);
                            false
                        }
                        Some(_) => data_plane,
                        None => false,
                    }
                }
            };
            let step = match action {
                Action::Cordon(_) => Some(Step::Cordon),
                Action::Evict { .. } => Some(Step::Evict),
                Action::Release { .. } => None,
            };
            if done && step.is_some_and(|s| hooks.halted_after(key, s)) {
                return Err(Stop::Halted);
            }
            // A node not cordoned (or not released) as planned: nothing after it is sent — no
            // eviction from a node left schedulable, no next node cordoned beside one still
            // held. The next pass decides again from what the cluster shows.
            if !done && !matches!(action, Action::Evict { .. }) {
                break;
            }
        }
        self.say_refusals(rollout, refusals).await;
        Ok(())
    }

    async fn cordon(&self, key: &str, node: &str) -> bool {
        match cluster::cordon(&self.cluster, node, key).await {
            Ok(()) => {
                tracing::info!(%node, "node cordoned and claimed");
                true
            }
            Err(err) => {
                tracing::info!(error = %err, %node, "cordoning deferred");
                false
            }
        }
    }

    async fn release(&self, key: &str, node: &str, uncordon: bool) -> bool {
        match cluster::release(&self.cluster, node, key, uncordon).await {
            Ok(()) => {
                tracing::info!(%node, uncordon, "node released");
                true
            }
            Err(err) => {
                tracing::info!(error = %err, %node, "releasing deferred");
                false
            }
        }
    }

    /// The eviction's outcome; `None` when it failed (tried again on the next pass).
    async fn evict(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        data_plane: bool,
    ) -> Option<Evicted> {
        match cluster::evict(&self.cluster, namespace, name, uid).await {
            Ok(outcome) => {
                let result = match &outcome {
                    Evicted::Accepted => "accepted",
                    Evicted::Gone => "gone",
                    Evicted::Refused(_) => "budget",
                };
                self.metrics.eviction(data_plane, result);
                tracing::info!(pod = %format!("{namespace}/{name}"), %uid, result, "eviction");
                Some(outcome)
            }
            Err(err) => {
                self.metrics.eviction(data_plane, "error");
                tracing::info!(error = %err, pod = %format!("{namespace}/{name}"), "eviction deferred");
                None
            }
        }
    }

    /// The budgets that refused evictions named on their nodes, for people (the node waits:
    /// a budget is a clear cause, never failed by the wait limit).
    async fn say_refusals(
        &self,
        rollout: DataPlaneRollout,
        refusals: BTreeMap<String, Vec<String>>,
    ) {
        if refusals.is_empty() {
            return;
        }
        let mut status = rollout.status.clone();
        for node in &mut status.nodes {
            if let Some(blockers) = refusals.get(&node.name) {
                node.reason = "EvictionRefused".into();
                node.message = blockers.join("; ");
                node.blocked_by = blockers.clone();
            }
        }
        let changes = status::changes(&rollout.status.nodes, &status.nodes);
        if let Some(stored) = self.write_status(rollout, status).await {
            for change in changes {
                let event = event(true, "EvictionRefused", &change.message);
                self.events
                    .publish(event, &rollout_reference(&stored))
                    .await;
            }
        }
    }

    /// Whether this replica still leads, read right before a write to the cluster.
    async fn leading(&self) -> Result<(), Stop> {
        match self.store.fence().check().await {
            Ok(()) => Ok(()),
            Err(err) => {
                tracing::warn!(error = %err, "not writing to the cluster: the leadership term is over");
                Err(Stop::TermOver)
            }
        }
    }
}

fn names(rollout: &DataPlaneRollout) -> (&str, &str) {
    (
        rollout.metadata.namespace.as_deref().unwrap_or_default(),
        rollout.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn rollout_reference(rollout: &DataPlaneRollout) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{}/v1alpha1", svm_api::PROJECT.name)),
        kind: Some(KIND.into()),
        name: rollout.metadata.name.clone(),
        namespace: rollout.metadata.namespace.clone(),
        uid: rollout.metadata.uid.clone(),
        resource_version: rollout.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn event(warning: bool, reason: &str, message: &str) -> Event {
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(message.into()),
        action: "RollOutDataPlane".into(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn rollout(name: &str, settled: Option<&str>) -> (String, DataPlaneRollout) {
        let mut rollout = DataPlaneRollout::default();
        rollout.metadata.namespace = Some("storage".into());
        rollout.metadata.name = Some(name.into());
        rollout.metadata.generation = Some(2);
        rollout.status.observed_generation = Some(2);
        if let Some(type_) = settled {
            rollout.status.conditions.push(Condition {
                type_: type_.into(),
                status: "True".into(),
                reason: "R".into(),
                message: String::new(),
                observed_generation: Some(2),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            });
        }
        (key_of(&rollout), rollout)
    }

    #[test]
    fn succeeded_rollouts_are_passed_over_once_a_minute_the_others_on_every_tick() {
        let known: BTreeMap<String, DataPlaneRollout> = [
            rollout("running", None),
            rollout("done", Some(SUCCEEDED)),
            rollout("failed", Some(svm_api::dataplane::FAILED)),
        ]
        .into_iter()
        .collect();
        // Never passed over: all due.
        assert_eq!(due_on_tick(&known, &BTreeMap::new()).len(), 3);
        let just_now: BTreeMap<String, Instant> =
            known.keys().map(|k| (k.clone(), Instant::now())).collect();
        // A failed one stays due: a person mending its node is seen at once.
        assert_eq!(
            due_on_tick(&known, &just_now),
            ["storage/failed", "storage/running"]
        );
        // A new spec (generation not observed yet) is not settled.
        let mut edited = known.clone();
        if let Some(done) = edited.get_mut("storage/done") {
            done.metadata.generation = Some(3);
        }
        assert_eq!(
            due_on_tick(&edited, &just_now),
            ["storage/done", "storage/failed", "storage/running"]
        );
    }
}

//! One scenario's world: its namespace, its Nodes, its data-plane DaemonSet `engine` and the
//! engine's replicas, with what the suite has no component for played here, every [`STEP`]:
//!
//! - **the Nodes' kubelets' heartbeat**: `<ns>-node-<i>`, hand-made Node objects labelled
//!   [`SCENARIO_LABEL`]`=<ns>`, whose `Ready` condition is written through the status
//!   subresource and kept as the scenario wants it ([`Stage::set_node_ready`]); and the
//!   node-lifecycle controller's part for them: the `node.kubernetes.io/not-ready:NoSchedule`
//!   taint kube-apiserver's admission puts on every new Node is taken off while the Node is
//!   Ready and put back while it is not (the DaemonSet controller places no pod on a Node
//!   with it);
//! - **the scheduler's binding**: a pod the DaemonSet controller made (no `nodeName`, a
//!   `nodeAffinity` with `matchFields metadata.name In [<node>]`) for one of the stage's Nodes
//!   is bound to it with `POST pods/<name>/binding`, as kube-scheduler binds;
//! - **the kubelet**: a pod bound to one of the stage's Nodes is marked Running and Ready
//!   (status subresource), unless the scenario holds its readiness
//!   ([`Stage::hold_revision`], [`Stage::hold_node`]); a pod with a `deletionTimestamp` is
//!   deleted for good with `gracePeriodSeconds=0` and its uid as precondition, as the kubelet
//!   does once its containers stopped. The consumer pods a scenario makes (with `nodeName`) are
//!   run the same way;
//! - **the storage engine**: the `replicas.engine.test` objects of the namespace
//!   (`tests/fixtures/engine`) go to `error` when their node has no Ready `engine` pod, and back
//!   to `running` [`Stage::rebuild`] after a new one is Ready there (the rebuild).
//!
//! And what the scenarios assert on, recorded by watches as it happens (the moment it was seen,
//! from the stage's start): each Node's cordon and uncordon and its claim annotation, each
//! replica's state, each pod Ready, deleting and gone ([`Moment`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::support::kubectl::Kubectl;
use crate::support::wait::eventually_async_every;

/// The label on a scenario's Nodes, its DaemonSets' pods and its consumer pods: its namespace.
pub(super) const SCENARIO_LABEL: &str = "dp.test/scenario";
/// The data-plane DaemonSet of every scenario.
pub(super) const DS: &str = "engine";
/// The claim annotation a rollout writes on a Node it holds.
pub(super) const CLAIM: &str = svm_api::names::DATA_PLANE_ROLLOUT_CLAIM_ANNOTATION;
/// The label the DaemonSet controller gives each pod: the revision it was made from.
pub(super) const REVISION_LABEL: &str = "controller-revision-hash";
/// How often the played components act, and the waits on them look.
pub(super) const STEP: Duration = Duration::from_millis(100);
/// A hang guard for waits: how long what a wait watches may stay the same.
pub(super) const LIMIT: Duration = Duration::from_secs(120);
/// The played rebuild: a replica comes back `running` this long after its node's new engine
/// pod is Ready.
const REBUILD: Duration = Duration::from_millis(500);

/// What a watch saw, and when (since the stage started).
#[derive(Clone, Debug)]
pub(super) struct Moment {
    pub(super) at: Duration,
    pub(super) what: What,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum What {
    Cordoned(String),
    Uncordoned(String),
    /// The node's claim annotation changed (its value, `None` when removed).
    Claim(String, Option<String>),
    /// A replica's `status.currentState` changed.
    Replica {
        name: String,
        state: String,
    },
    PodReady(PodSeen),
    PodDeleting(PodSeen),
    PodGone(PodSeen),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PodSeen {
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) node: String,
    pub(super) revision: String,
    /// `app` label: `engine` for the data plane.
    pub(super) app: String,
}

/// What the played components are told, and what the watches recorded.
#[derive(Default)]
struct Shared {
    not_ready_nodes: BTreeSet<String>,
    held_revisions: BTreeSet<String>,
    held_nodes: BTreeSet<String>,
    /// Node → (uid, since) of its Ready engine pod, as the engine saw it.
    engine_ready_since: BTreeMap<String, (String, Instant)>,
    /// Pods the kubelet deleted for good (uid → when), not to ask again at every step.
    deleted: BTreeMap<String, Instant>,
    moments: Vec<Moment>,
    unschedulable: BTreeMap<String, bool>,
    claims: BTreeMap<String, Option<String>>,
    replica_states: BTreeMap<String, String>,
    pods_ready: BTreeSet<String>,
    pods_deleting: BTreeSet<String>,
}

/// One volume's replicas: its name and the (1-based) nodes holding one.
pub(super) type Volume<'a> = (&'a str, &'a [usize]);

/// A scenario's namespace, Nodes and DaemonSet, with the played components running.
pub(super) struct Stage {
    pub(super) ns: String,
    pub(super) nodes: Vec<String>,
    pub(super) client: kube::Client,
    pub(super) kubectl: Kubectl,
    pub(super) pods: Api<Pod>,
    pub(super) replicas: Api<DynamicObject>,
    pub(super) daemon_sets: Api<DaemonSet>,
    started: Instant,
    shared: Arc<Mutex<Shared>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Stage {
    /// Namespace `ns`, Nodes `<ns>-node-1..=count` Ready, the played components running, the
    /// DaemonSet `engine` (image `example.test/engine:1`, `OnDelete`) Ready on every Node, and
    /// the replicas of `volumes`, `running`.
    pub(super) async fn start(
        client: &kube::Client,
        kubectl: &Kubectl,
        ns: &str,
        count: usize,
        volumes: &[Volume<'_>],
    ) -> Stage {
        let stage = Stage::empty(client, kubectl, ns, count).await;
        stage.create_daemon_set(DS, "OnDelete").await;
        stage.wait_engines_ready().await;
        for (volume, on) in volumes {
            for index in *on {
                stage.add_replica(volume, *index).await;
            }
        }
        stage
    }

    /// The namespace, the Nodes and the played components; no DaemonSet yet.
    pub(super) async fn empty(
        client: &kube::Client,
        kubectl: &Kubectl,
        ns: &str,
        count: usize,
    ) -> Stage {
        create_namespace(client, kubectl, ns).await;
        let nodes: Vec<String> = (1..=count).map(|i| format!("{ns}-node-{i}")).collect();
        let node_api: Api<Node> = Api::all(client.clone());
        for (index, name) in nodes.iter().enumerate() {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    SCENARIO_LABEL: ns,
                    "kubernetes.io/hostname": name,
                    "dp.test/index": (index + 1).to_string(),
                }},
            }))
            .unwrap();
            node_api
                .create(&PostParams::default(), &node)
                .await
                .unwrap();
        }
        let mut stage = Stage {
            ns: ns.to_string(),
            nodes,
            client: client.clone(),
            kubectl: kubectl.clone(),
            pods: Api::namespaced(client.clone(), ns),
            replicas: Api::namespaced_with(client.clone(), ns, &replica_resource()),
            daemon_sets: Api::namespaced(client.clone(), ns),
            started: Instant::now(),
            shared: Arc::default(),
            tasks: Vec::new(),
        };
        stage.spawn_players();
        for name in &stage.nodes {
            stage.wait_node(name, true).await;
        }
        stage
    }

    fn spawn_players(&mut self) {
        let selector = format!("{SCENARIO_LABEL}={}", self.ns);
        let config = watcher::Config::default().labels(&selector);
        let (nodes, node_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        let replica_writer = reflector::store::Writer::new(replica_resource());
        let replicas = replica_writer.as_reader();
        let node_events = reflector::reflector(
            node_writer,
            watcher(Api::<Node>::all(self.client.clone()), config.clone()),
        );
        let pod_events = reflector::reflector(
            pod_writer,
            watcher(Api::<Pod>::all(self.client.clone()), config),
        );
        let replica_events = reflector::reflector(
            replica_writer,
            watcher(self.replicas.clone(), watcher::Config::default()),
        );
        let record = Recorder {
            started: self.started,
            shared: self.shared.clone(),
        };
        self.tasks.push(tokio::spawn(record.clone().follow(
            node_events,
            |r: &Recorder, node: &Node| r.saw_node(node),
            |_, _| {},
        )));
        self.tasks.push(tokio::spawn(record.clone().follow(
            pod_events,
            |r: &Recorder, pod: &Pod| r.saw_pod(pod),
            |r: &Recorder, pod: &Pod| r.saw_pod_gone(pod),
        )));
        self.tasks.push(tokio::spawn(record.follow(
            replica_events,
            |r: &Recorder, replica: &DynamicObject| r.saw_replica(replica),
            |_, _| {},
        )));
        let players = Players {
            ns: self.ns.clone(),
            nodes: self.nodes.clone(),
            node_api: Api::all(self.client.clone()),
            client: self.client.clone(),
            replicas_api: self.replicas.clone(),
            node_store: nodes,
            pod_store: pods,
            replica_store: replicas,
            shared: self.shared.clone(),
        };
        self.tasks.push(tokio::spawn(players.run()));
    }

    /// `kubectl get` of what the stage holds, for failure messages.
    pub(super) fn table(&self) -> String {
        let selector = format!("{SCENARIO_LABEL}={}", self.ns);
        let nodes = self
            .kubectl
            .run(&["get", "nodes", "-l", &selector, "-o", "wide"])
            .stdout;
        let pods = self
            .kubectl
            .run(&["get", "pods", "-A", "-l", &selector, "-o", "wide"])
            .stdout;
        let replicas = self
            .kubectl
            .run(&["get", "replicas.engine.test", "-n", &self.ns])
            .stdout;
        format!("{nodes}\n{pods}\n{replicas}")
    }

    pub(super) fn node(&self, index: usize) -> String {
        self.nodes[index - 1].clone()
    }

    /// The played kubelet reports the Node Ready (or not).
    pub(super) fn set_node_ready(&self, index: usize, ready: bool) {
        let name = self.node(index);
        let mut shared = self.shared.lock().unwrap();
        if ready {
            shared.not_ready_nodes.remove(&name);
        } else {
            shared.not_ready_nodes.insert(name);
        }
    }

    /// Pods of this revision are never made Ready (until released).
    pub(super) fn hold_revision(&self, revision: &str) {
        let mut shared = self.shared.lock().unwrap();
        shared.held_revisions.insert(revision.to_string());
    }

    pub(super) fn release_revision(&self, revision: &str) {
        self.shared.lock().unwrap().held_revisions.remove(revision);
    }

    /// New pods on this node are not made Ready (until released).
    pub(super) fn hold_node(&self, index: usize) {
        let name = self.node(index);
        self.shared.lock().unwrap().held_nodes.insert(name);
    }

    pub(super) fn release_node(&self, index: usize) {
        let name = self.node(index);
        self.shared.lock().unwrap().held_nodes.remove(&name);
    }

    /// How long the played engine takes to rebuild a node's replicas.
    pub(super) fn rebuild(&self) -> Duration {
        REBUILD
    }

    /// Until the Node's Ready condition and taint are as wanted.
    pub(super) async fn wait_node(&self, name: &str, ready: bool) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("Node {name} Ready={ready}"),
            async || {
                let node = nodes.get(name).await.map_err(|e| e.to_string())?;
                if node_ready(&node) == ready && has_not_ready_taint(&node) != ready {
                    Ok(())
                } else {
                    Err(format!("{:?} {:?}", node.status, node.spec))
                }
            },
            async || String::new(),
        )
        .await
    }

    /// A DaemonSet `name` of the scenario's Nodes (pods labelled `app=<name>` and the
    /// scenario's label), with the given update strategy.
    pub(super) async fn create_daemon_set(&self, name: &str, strategy: &str) {
        let labels = json!({"app": name, SCENARIO_LABEL: self.ns});
        let daemon_set: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "updateStrategy": {"type": strategy},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {SCENARIO_LABEL: self.ns},
                        "containers": [{"name": "engine", "image": "example.test/engine:1"}],
                    },
                },
            },
        }))
        .unwrap();
        self.daemon_sets
            .create(&PostParams::default(), &daemon_set)
            .await
            .unwrap();
    }

    /// The DaemonSet's pods, running or not.
    pub(super) async fn engine_pods(&self, daemon_set: &str) -> Vec<Pod> {
        let params = ListParams::default().labels(&format!("app={daemon_set}"));
        self.pods.list(&params).await.unwrap().items
    }

    /// The uids of the `engine` pods not being deleted.
    pub(super) async fn engine_uids(&self) -> BTreeSet<String> {
        self.engine_pods(DS)
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    }

    /// Until every Node runs one Ready `engine` pod of the DaemonSet's newest revision, made
    /// by kube-controller-manager; node → (pod name, uid).
    pub(super) async fn wait_engines_ready(&self) -> BTreeMap<String, (String, String)> {
        self.wait_pods_of(DS, &self.newest_revision(DS).await).await
    }

    /// Until every Node runs one Ready pod of `daemon_set` at `revision` and no other of
    /// its pods; node → (pod name, uid).
    pub(super) async fn wait_pods_of(
        &self,
        daemon_set: &str,
        revision: &str,
    ) -> BTreeMap<String, (String, String)> {
        eventually_async_every(
            LIMIT,
            STEP,
            &format!(
                "{}: a Ready pod of DaemonSet {daemon_set} revision {revision} on each node",
                self.ns
            ),
            async || {
                let pods = self.engine_pods(daemon_set).await;
                let mut on: BTreeMap<String, (String, String)> = BTreeMap::new();
                let mut other = Vec::new();
                for pod in &pods {
                    let seen = pod_seen(pod);
                    let ok = is_ready(pod)
                        && pod.metadata.deletion_timestamp.is_none()
                        && seen.revision == revision
                        && self.nodes.contains(&seen.node);
                    if ok {
                        on.insert(seen.node.clone(), (seen.name, seen.uid));
                    } else {
                        other.push(seen);
                    }
                }
                if on.len() == self.nodes.len() && other.is_empty() {
                    for pod in &pods {
                        assert_eq!(
                            crate::world::creator(&pod.metadata),
                            "kube-controller-manager",
                            "pods made by the DaemonSet controller: {:?}",
                            pod.metadata
                        );
                    }
                    Ok(on)
                } else {
                    Err(format!("ready on {:?}; others {other:?}", on.keys()))
                }
            },
            async || self.table(),
        )
        .await
    }

    /// The hash of the DaemonSet's newest ControllerRevision (what its newest pods carry).
    pub(super) async fn newest_revision(&self, daemon_set: &str) -> String {
        let revisions: Api<ControllerRevision> = Api::namespaced(self.client.clone(), &self.ns);
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("{}: a ControllerRevision of {daemon_set}", self.ns),
            async || {
                let params = ListParams::default().labels(&format!("app={daemon_set}"));
                let list = revisions.list(&params).await.map_err(|e| e.to_string())?;
                list.items
                    .iter()
                    .filter(|r| owned_by(&r.metadata, daemon_set))
                    .max_by_key(|r| r.revision)
                    .and_then(|r| r.metadata.labels.as_ref()?.get(REVISION_LABEL).cloned())
                    .ok_or_else(|| format!("{} revisions", list.items.len()))
            },
            async || String::new(),
        )
        .await
    }

    /// Set the DaemonSet's image; returns the new newest revision once the DaemonSet
    /// controller made it.
    pub(super) async fn set_image(&self, daemon_set: &str, image: &str) -> String {
        let before = self.newest_revision(daemon_set).await;
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "engine", "image": image}
        ]}}}});
        self.daemon_sets
            .patch(
                daemon_set,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .unwrap();
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("{}: a new ControllerRevision of {daemon_set}", self.ns),
            async || {
                let now = self.newest_revision(daemon_set).await;
                if now == before { Err(now) } else { Ok(now) }
            },
            async || String::new(),
        )
        .await
    }

    /// The scenario's volume `volume` as a guard names it: `<ns>/<volume>` (replicas are read
    /// from every namespace; a namespaced replica's volume is known with its namespace, so the
    /// scenarios' `vol-1`s are distinct volumes).
    pub(super) fn volume(&self, volume: &str) -> String {
        format!("{}/{volume}", self.ns)
    }

    /// A replica `<volume>-<index>` of `volume` on node `index`, `running`.
    pub(super) async fn add_replica(&self, volume: &str, index: usize) {
        let node = self.node(index);
        let name = format!("{volume}-{index}");
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "engine.test/v1",
            "kind": "Replica",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"nodeID": node, "volumeName": volume},
        }))
        .unwrap();
        self.replicas
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let status = json!({"status": {"currentState": "running"}});
        self.replicas
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    /// A consumer pod `name` with labels `labels` bound to node `index` in namespace `ns`
    /// (the played kubelet runs it); returns once it is Ready.
    pub(super) async fn add_consumer(&self, ns: &str, name: &str, index: usize, app: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"app": app, SCENARIO_LABEL: self.ns}},
            "spec": {
                "nodeName": self.node(index),
                "containers": [{"name": "app", "image": "example.test/app:1"}],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("consumer pod {ns}/{name} Ready"),
            async || match pods.get(name).await {
                Ok(pod) if is_ready(&pod) => Ok(()),
                other => Err(format!("{:?}", other.map(|p| p.status))),
            },
            async || String::new(),
        )
        .await
    }

    /// Everything the watches saw, in order.
    pub(super) fn moments(&self) -> Vec<Moment> {
        self.shared.lock().unwrap().moments.clone()
    }

    /// The nodes cordoned now, as the Node watch last saw them.
    pub(super) fn cordoned(&self) -> BTreeSet<String> {
        let shared = self.shared.lock().unwrap();
        shared
            .unschedulable
            .iter()
            .filter(|(_, on)| **on)
            .map(|(node, _)| node.clone())
            .collect()
    }

    /// The nodes claimed now (node → rollout), as the Node watch last saw them.
    pub(super) fn claimed(&self) -> BTreeMap<String, String> {
        let shared = self.shared.lock().unwrap();
        shared
            .claims
            .iter()
            .filter_map(|(node, claim)| Some((node.clone(), claim.clone()?)))
            .collect()
    }

    /// How long since the stage started (the clock of [`Moment::at`]).
    pub(super) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub(super) fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

pub(super) fn replica_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("engine.test", "v1", "Replica"),
        "replicas",
    )
}

/// Until `done` holds of what the stage's watches saw.
pub(super) async fn wait_until(stage: &Stage, what: &str, done: impl Fn(&Stage) -> bool) {
    eventually_async_every(
        LIMIT,
        STEP,
        &format!("{}: {what}", stage.ns),
        async || {
            if done(stage) {
                Ok(())
            } else {
                Err(format!("{} moments seen", stage.moments().len()))
            }
        },
        async || format!("{:#?}\n{}", stage.moments(), stage.table()),
    )
    .await
}

/// A namespace, once kube-controller-manager's service-account controller made the
/// `default` ServiceAccount its pods need.
pub(super) async fn create_namespace(client: &kube::Client, kubectl: &Kubectl, ns: &str) {
    crate::world::namespace_for_pods(client, kubectl, ns, LIMIT).await;
}

/// What the watches saw, recorded into [`Shared`].
#[derive(Clone)]
struct Recorder {
    started: Instant,
    shared: Arc<Mutex<Shared>>,
}

impl Recorder {
    /// Drain a reflector's events (keeping its store current), recording what each says.
    async fn follow<K, S>(
        self,
        events: S,
        applied: impl Fn(&Recorder, &K),
        deleted: impl Fn(&Recorder, &K),
    ) where
        S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    {
        let mut events = std::pin::pin!(events.default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    applied(&self, &object)
                }
                Ok(watcher::Event::Delete(object)) => deleted(&self, &object),
                _ => {}
            }
        }
    }

    fn push(&self, shared: &mut Shared, what: What) {
        shared.moments.push(Moment {
            at: self.started.elapsed(),
            what,
        });
    }

    fn saw_node(&self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let claim = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLAIM).cloned());
        let mut shared = self.shared.lock().unwrap();
        let was = shared.unschedulable.insert(name.clone(), unschedulable);
        if was.unwrap_or(false) != unschedulable {
            let what = if unschedulable {
                What::Cordoned(name.clone())
            } else {
                What::Uncordoned(name.clone())
            };
            self.push(&mut shared, what);
        }
        let was = shared.claims.insert(name.clone(), claim.clone());
        if was.flatten() != claim {
            self.push(&mut shared, What::Claim(name, claim));
        }
    }

    fn saw_pod(&self, pod: &Pod) {
        let seen = pod_seen(pod);
        let mut shared = self.shared.lock().unwrap();
        if is_ready(pod) && shared.pods_ready.insert(seen.uid.clone()) {
            self.push(&mut shared, What::PodReady(seen.clone()));
        }
        if pod.metadata.deletion_timestamp.is_some()
            && shared.pods_deleting.insert(seen.uid.clone())
        {
            self.push(&mut shared, What::PodDeleting(seen));
        }
    }

    fn saw_pod_gone(&self, pod: &Pod) {
        let mut shared = self.shared.lock().unwrap();
        self.push(&mut shared, What::PodGone(pod_seen(pod)));
    }

    fn saw_replica(&self, replica: &DynamicObject) {
        let name = replica.metadata.name.clone().unwrap_or_default();
        let state = replica_state(replica);
        let mut shared = self.shared.lock().unwrap();
        let was = shared.replica_states.insert(name.clone(), state.clone());
        if was.as_deref() != Some(state.as_str()) {
            self.push(&mut shared, What::Replica { name, state });
        }
    }
}

/// The played kubelet, scheduler binding and storage engine of one stage.
struct Players {
    ns: String,
    nodes: Vec<String>,
    node_api: Api<Node>,
    client: kube::Client,
    replicas_api: Api<DynamicObject>,
    node_store: Store<Node>,
    pod_store: Store<Pod>,
    replica_store: Store<DynamicObject>,
    shared: Arc<Mutex<Shared>>,
}

impl Players {
    async fn run(self) {
        loop {
            self.heartbeat().await;
            self.bind().await;
            self.kubelet().await;
            self.engine().await;
            tokio::time::sleep(STEP).await;
        }
    }

    /// Each Node's Ready condition as the scenario wants it, and the node-lifecycle
    /// controller's `not-ready` taint to match.
    async fn heartbeat(&self) {
        let not_ready = self.shared.lock().unwrap().not_ready_nodes.clone();
        for name in &self.nodes {
            let want = !not_ready.contains(name);
            let node = self
                .node_store
                .state()
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(name));
            let Some(node) = node else {
                continue;
            };
            if node_ready(&node) != want {
                self.report_ready(name, want).await;
            }
            if has_not_ready_taint(&node) == want {
                let taints = if want {
                    json!(null)
                } else {
                    json!([{"key": NOT_READY_TAINT, "effect": "NoSchedule"}])
                };
                let patch = json!({"spec": {"taints": taints}});
                let _ = self
                    .node_api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        }
    }

    async fn report_ready(&self, name: &str, ready: bool) {
        let stamp = jiff::Timestamp::now().to_string();
        let (status, reason) = if ready {
            ("True", "KubeletReady")
        } else {
            ("False", "KubeletNotReady")
        };
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": reason,
            "message": format!("played by the test: {reason}"),
            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
        }]}});
        let _ = self
            .node_api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }

    /// The scheduler's binding of a DaemonSet pod to the node its affinity names.
    async fn bind(&self) {
        for pod in self.pod_store.state() {
            let spec = pod.spec.as_ref();
            if spec.and_then(|s| s.node_name.as_ref()).is_some()
                || pod.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let Some(node) = affinity_node(&pod) else {
                continue;
            };
            if !self.nodes.contains(&node) {
                continue;
            }
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let _ = pods
                .create_subresource::<_, Value>("binding", &name, &PostParams::default(), &binding)
                .await;
        }
    }

    /// The kubelet: pods on the stage's nodes Running and Ready (unless held), pods being
    /// deleted deleted for good.
    async fn kubelet(&self) {
        let (held_revisions, held_nodes) = {
            let shared = self.shared.lock().unwrap();
            (shared.held_revisions.clone(), shared.held_nodes.clone())
        };
        for pod in self.pod_store.state() {
            let seen = pod_seen(&pod);
            if !self.nodes.contains(&seen.node) {
                continue;
            }
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            if pod.metadata.deletion_timestamp.is_some() {
                self.delete_for_good(&pods, &seen).await;
                continue;
            }
            let held = seen.app == DS
                && (held_revisions.contains(&seen.revision) || held_nodes.contains(&seen.node));
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if is_ready(&pod) || (held && running) {
                continue;
            }
            let ready = if held { "False" } else { "True" };
            let stamp = jiff::Timestamp::now().to_string();
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": stamp},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": stamp},
            ]}});
            let _ = pods
                .patch_status(&seen.name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }

    async fn delete_for_good(&self, pods: &Api<Pod>, seen: &PodSeen) {
        {
            let mut shared = self.shared.lock().unwrap();
            let recent = shared
                .deleted
                .get(&seen.uid)
                .is_some_and(|at| at.elapsed() < Duration::from_secs(1));
            if recent {
                return;
            }
            shared.deleted.insert(seen.uid.clone(), Instant::now());
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(seen.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = pods.delete(&seen.name, &params).await;
    }

    /// The engine: replicas in `error` on a node without a Ready engine pod, `running` again
    /// [`REBUILD`] after one is Ready there.
    async fn engine(&self) {
        let ready: BTreeMap<String, String> = self
            .pod_store
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(self.ns.as_str()))
            .filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .map(|p| pod_seen(p))
            .filter(|p| p.app == DS && !p.node.is_empty())
            .map(|p| (p.node, p.uid))
            .collect();
        let since = {
            let mut shared = self.shared.lock().unwrap();
            let known = &mut shared.engine_ready_since;
            known.retain(|node, (uid, _)| ready.get(node) == Some(uid));
            for (node, uid) in &ready {
                known
                    .entry(node.clone())
                    .or_insert_with(|| (uid.clone(), Instant::now()));
            }
            known.clone()
        };
        for replica in self.replica_store.state() {
            let node = replica.data["spec"]["nodeID"].as_str().unwrap_or_default();
            let state = replica_state(&replica);
            let want = match since.get(node) {
                None => "error",
                Some((_, at)) if state == "error" && at.elapsed() < REBUILD => "error",
                Some(_) if state.is_empty() => continue,
                Some(_) => "running",
            };
            if state == want {
                continue;
            }
            let name = replica.metadata.name.clone().unwrap_or_default();
            let status = json!({"status": {"currentState": want}});
            let _ = self
                .replicas_api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }
}

/// The taint kube-apiserver's `TaintNodesByCondition` admission puts on every new Node and
/// the node-lifecycle controller keeps while it is not Ready.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn has_not_ready_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == NOT_READY_TAINT))
}

/// The node a DaemonSet pod's affinity names (`matchFields metadata.name In [node]`).
fn affinity_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

pub(super) fn pod_seen(pod: &Pod) -> PodSeen {
    let label = |key: &str| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key).cloned())
            .unwrap_or_default()
    };
    PodSeen {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        node: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        revision: label(REVISION_LABEL),
        app: label("app"),
    }
}

pub(super) fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn replica_state(replica: &DynamicObject) -> String {
    replica.data["status"]["currentState"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn owned_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    owner: &str,
) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.kind == "DaemonSet" && r.name == owner)
}

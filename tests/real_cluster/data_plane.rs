//! DataPlaneRollouts on the real kube-apiserver with Kubernetes' own controllers: the real
//! kube-controller-manager runs [`CONTROLLERS`] with its defaults otherwise. Its DaemonSet
//! controller makes each scenario's data-plane pods (one per Node, with the affinity the
//! scheduler binds by), keeps one `ControllerRevision` per template and, the DaemonSet being
//! `OnDelete`, makes a pod of the newest template on a node only once the old one is gone — our
//! controller's eviction is what moves a node; its disruption controller keeps the
//! PodDisruptionBudgets' status that kube-apiserver's Eviction API judges by (the 429s);
//! its garbage collector, namespace and service-account controllers do their usual part (each
//! namespace's `default` ServiceAccount that pods need).
//!
//! What no component of the suite can do is played by [`stage::Stage`], each scenario on its
//! own Nodes: the kubelets' heartbeat (hand-made Nodes kept Ready, or made NotReady), the
//! scheduler's binding of the DaemonSet's pods, the kubelet (pods Running and Ready, or held
//! un-Ready; a deleted pod removed for good), and a storage engine whose replicas
//! (`replicas.engine.test`, `tests/fixtures/engine`) go to `error` when their node loses its
//! engine pod and are rebuilt a while after the new one is Ready. kube-controller-manager's
//! node-lifecycle controller does not run: it would mark the hand-made Nodes unreachable.
//!
//! One cluster and one kube-controller-manager serve every scenario, each in its own namespace
//! on its own Nodes. What the scenarios hold: a Node watch (every cordon and uncordon, and
//! when), the engine's replica states, and kube-apiserver's audit log of every eviction (and
//! every pod or Node write of svm-apiserver's). Each scenario's wall time is printed (never
//! asserted); waits fail when nothing moves for [`stage::LIMIT`], not on a total.

mod changes;
mod crashes;
mod gates;
mod layouts;
mod refusals;
mod stage;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use svm_api::dataplane::{DataPlaneRollout, NodeStatus};

use crate::support::audit::{AuditLog, AuditedRequest};
use crate::support::kubectl::Kubectl;
use crate::support::real_cluster::{NAMESPACE, RealCluster, SERVICE_ACCOUNT};
use crate::support::wait::eventually_async_every;
use stage::{CLAIM, DS, LIMIT, Moment, STEP, Stage, What};

const TEST: &str = "data_plane_rollouts_upgrade_engines_node_by_node";

/// kube-controller-manager's controllers the scenarios need (not node-lifecycle: it would
/// mark the hand-made Nodes unreachable and taint them).
const CONTROLLERS: [&str; 5] = [
    "daemonset-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
];

/// svm-apiserver's flags: the DataPlaneRollout controller alone, a pass every second, and a
/// short leader lease so that a restarted process leads again after seconds (the crash
/// scenario; leader election stays on, so the term checks are the production ones).
const SVM_FLAGS: [&str; 6] = [
    "--enable-data-plane-rollouts",
    "--controllers=dataplane",
    "--data-plane-resync-interval=1s",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];

/// svm-apiserver's user (its ServiceAccount).
const SVM_USER: &str = "system:serviceaccount:svm-system:svm-apiserver";

/// What kube-apiserver's audit log keeps: every eviction (whoever asks), and every write of
/// svm-apiserver's to pods and Nodes (a bare DELETE of a pod would be there).
const AUDIT_RULES: &str = r#"- level: Metadata
  verbs: ["create"]
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Metadata
  users: ["system:serviceaccount:svm-system:svm-apiserver"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["pods", "nodes"]
- level: None"#;

/// What every scenario works with.
struct World<'a> {
    client: kube::Client,
    kubectl: Kubectl,
    audit: &'a AuditLog,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_plane_rollouts_upgrade_engines_node_by_node() {
    let audit = AuditLog::with_rules(AUDIT_RULES);
    let audit_flags = audit.flags();
    let audit_flags: Vec<&str> = audit_flags.iter().map(String::as_str).collect();
    let Some(mut cluster) = RealCluster::start(TEST, &audit_flags, &SVM_FLAGS) else {
        return;
    };
    assert_eq!(
        SVM_USER,
        format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}")
    );
    let kubectl = cluster.kubectl();
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/engine/replicas.engine.test.yaml"
    );
    kubectl.ok(&["apply", "-f", crd]);
    crate::world::wait_established(&kubectl, &["crd/replicas.engine.test"]);
    let kcm = crate::world::start_controller_manager(&cluster.plane, &CONTROLLERS, &[]);
    let world = World {
        client: client_without_retries(&cluster.plane.kubeconfig).await,
        kubectl: kubectl.clone(),
        audit: &audit,
    };

    timed(
        "the played cluster",
        the_played_cluster_runs_a_daemon_set(&world),
    )
    .await;
    timed("bad input", refusals::bad_input_is_refused(&world)).await;
    timed(
        "failing layouts",
        layouts::failing_layouts_block_until_a_replica_is_added(&world),
    )
    .await;
    timed(
        "succeeding layouts",
        layouts::succeeding_layouts_go_one_node_at_a_time(&world),
    )
    .await;
    timed("ten nodes", layouts::ten_nodes_where_the_time_goes(&world)).await;
    timed(
        "a PodDisruptionBudget",
        gates::a_pdb_holds_the_consumers_eviction(&world),
    )
    .await;
    timed(
        "a pod never Ready",
        gates::a_pod_never_ready_fails_the_node(&world),
    )
    .await;
    timed(
        "pause and resume",
        changes::pause_and_resume_mid_node(&world),
    )
    .await;
    timed(
        "an admin's cordon",
        changes::an_admins_cordon_is_kept(&world),
    )
    .await;
    timed(
        "a template change",
        changes::a_template_change_queues_nodes_again(&world),
    )
    .await;
    timed(
        "two rollouts",
        changes::two_rollouts_on_the_same_nodes(&world),
    )
    .await;
    the_metrics_agree_with_the_audit_log(&cluster, &audit).await;
    timed(
        "SIGKILL after the cordon and after the eviction",
        crashes::sigkill_after_the_cordon_and_after_the_eviction(&world, &mut cluster),
    )
    .await;
    print_svm_writes(&audit);
    events_on_nodes(&world);
    let errors = kcm.errors();
    println!(
        "kube-controller-manager's error lines: {} (first 10 below)",
        errors.len()
    );
    for line in errors.iter().take(10) {
        println!("  {line}");
    }
}

/// A kube client as the cluster admin that takes a 429 as an answer: the scenarios look at a
/// budget's refusal, which kube's default retry policy would retry for minutes.
async fn client_without_retries(kubeconfig: &std::path::Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// Run one scenario and print its wall time.
async fn timed(scenario: &str, run: impl Future<Output = ()>) {
    let started = Instant::now();
    run.await;
    println!(
        "scenario {scenario}: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The harness itself, before any rollout: kube-controller-manager's DaemonSet controller
/// makes a pod per Node, the played scheduler binds them and the played kubelet runs them; a
/// template change makes a new ControllerRevision and nothing else (`OnDelete`); an evicted pod
/// goes for good and the DaemonSet controller makes one of the newest revision in its place;
/// the played engine sends that node's replicas to `error` and rebuilds them once the new pod
/// is Ready. A PodDisruptionBudget holds an eviction (429) until another pod is Ready; a Node
/// made NotReady is tainted and untainted again.
async fn the_played_cluster_runs_a_daemon_set(world: &World<'_>) {
    let stage = Stage::start(
        &world.client,
        &world.kubectl,
        "dp-harness",
        2,
        &[("vol-1", &[1, 2])],
    )
    .await;
    let first = stage.wait_engines_ready().await;
    let old = stage.newest_revision(DS).await;
    let new = stage.set_image(DS, "example.test/engine:2").await;
    assert_ne!(old, new);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = stage.engine_pods(DS).await;
    assert!(
        pods.iter()
            .all(|p| stage::pod_seen(p).revision == old && p.metadata.deletion_timestamp.is_none()),
        "OnDelete: nothing replaced by itself: {}",
        stage.table()
    );
    let (name, uid) = first[&stage.node(1)].clone();
    let deleted_at = stage.elapsed();
    let evict = kube::api::EvictParams::default();
    stage.pods.evict(&name, &evict).await.unwrap();
    let after = wait_node_pod(&stage, 1, &new).await;
    assert_ne!(after.1, uid);
    // What the watches saw, in order: the pod deleting, gone, its replica in error, the new pod
    // Ready, the replica running again no sooner than the played rebuild.
    let moments: Vec<Moment> = stage
        .moments()
        .into_iter()
        .filter(|m| m.at >= deleted_at)
        .collect();
    let at = |want: &dyn Fn(&What) -> bool| {
        moments
            .iter()
            .find(|m| want(&m.what))
            .map(|m| m.at)
            .unwrap_or_else(|| panic!("not seen; moments: {moments:#?}"))
    };
    let deleting = at(&|w| matches!(w, What::PodDeleting(p) if p.uid == uid));
    let gone = at(&|w| matches!(w, What::PodGone(p) if p.uid == uid));
    let error =
        at(&|w| matches!(w, What::Replica{name, state} if name == "vol-1-1" && state == "error"));
    let ready = at(&|w| matches!(w, What::PodReady(p) if p.uid == after.1));
    let running = eventually_async_every(
        LIMIT,
        STEP,
        "replica vol-1-1 running again",
        async || {
            stage
                .moments()
                .iter()
                .find(|m| {
                    m.at > ready
                        && m.what
                            == What::Replica {
                                name: "vol-1-1".into(),
                                state: "running".into(),
                            }
                })
                .map(|m| m.at)
                .ok_or_else(|| stage.table())
        },
        async || String::new(),
    )
    .await;
    println!(
        "harness: deleting {deleting:?}, gone {gone:?}, replica error {error:?}, new pod Ready \
         {ready:?}, replica running {running:?}"
    );
    assert!(deleting <= gone && gone <= ready, "{moments:#?}");
    assert!(error <= ready, "{moments:#?}");
    assert!(running >= ready + stage.rebuild() / 2, "{moments:#?}");
    assert!(
        !stage.moments().iter().any(
            |m| matches!(&m.what, What::Replica{name, state} if name == "vol-1-2" && state == "error")
        ),
        "the other node's replica stays running"
    );
    a_budget_refuses_an_eviction_until_another_pod_is_ready(&stage).await;
    stage.set_node_ready(2, false);
    stage.wait_node(&stage.node(2), false).await;
    stage.set_node_ready(2, true);
    stage.wait_node(&stage.node(2), true).await;
    stage.stop();
}

/// The disruption controller and the Eviction API with the played kubelet: a consumer pod
/// alone under `minAvailable: 1` is refused (429) until a second one is Ready.
async fn a_budget_refuses_an_eviction_until_another_pod_is_ready(stage: &Stage) {
    let ns = stage.ns.clone();
    stage.add_consumer(&ns, "c-1", 1, "c").await;
    gates::create_pdb(&stage.client, &ns, "c", "c", 1, 1).await;
    let evict = kube::api::EvictParams::default();
    match stage.pods.evict("c-1", &evict).await {
        Err(kube::Error::Api(status)) if status.code == 429 => {
            println!("harness: eviction refused: {}", status.message)
        }
        other => panic!("the budget refuses c-1's eviction: {other:?}"),
    }
    stage.add_consumer(&ns, "c-2", 2, "c").await;
    gates::wait_pdb(&stage.client, &ns, "c", 2).await;
    stage.pods.evict("c-1", &evict).await.unwrap();
    eventually_async_every(
        LIMIT,
        STEP,
        "c-1 gone",
        async || match stage.pods.get_opt("c-1").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        },
        async || String::new(),
    )
    .await;
}

/// Until node `index` runs a Ready engine pod of `revision`: (name, uid).
async fn wait_node_pod(stage: &Stage, index: usize, revision: &str) -> (String, String) {
    let node = stage.node(index);
    eventually_async_every(
        LIMIT,
        STEP,
        &format!("a Ready engine pod of revision {revision} on {node}"),
        async || {
            let pods = stage.engine_pods(DS).await;
            pods.iter()
                .filter(|p| stage::is_ready(p) && p.metadata.deletion_timestamp.is_none())
                .map(stage::pod_seen)
                .find(|p| p.node == node && p.revision == revision)
                .map(|p| (p.name, p.uid))
                .ok_or_else(|| {
                    format!("{:?}", pods.iter().map(stage::pod_seen).collect::<Vec<_>>())
                })
        },
        async || stage.table(),
    )
    .await
}

// ---- rollouts ----

fn rollouts(client: &kube::Client, ns: &str) -> Api<DataPlaneRollout> {
    Api::namespaced(client.clone(), ns)
}

/// The guard every scenario uses: the played engine's replicas, `running` when healthy, one
/// healthy replica kept on other nodes.
fn replica_guard() -> Value {
    json!({
        "name": "replicas",
        "resource": {"group": "engine.test", "version": "v1", "resource": "replicas"},
        "nodeField": "spec.nodeID",
        "volumeField": "spec.volumeName",
        "healthy": {"field": "status.currentState", "value": "running"},
        "minHealthyElsewhere": 1,
    })
}

/// A rollout of `engine` guarded by [`replica_guard`], one node at a time; `spec` fields
/// added or replaced by `more`.
fn rollout_spec(more: Value) -> Value {
    let mut spec = json!({
        "daemonSet": DS,
        "maxUnavailable": 1,
        "replicaGuards": [replica_guard()],
    });
    if let (Some(spec), Some(more)) = (spec.as_object_mut(), more.as_object()) {
        for (key, value) in more {
            spec.insert(key.clone(), value.clone());
        }
    }
    spec
}

async fn create_rollout(stage: &Stage, name: &str, spec: Value) {
    let rollout: DataPlaneRollout = serde_json::from_value(json!({
        "apiVersion": "storage.svm-apiserver.io/v1alpha1",
        "kind": "DataPlaneRollout",
        "metadata": {"name": name, "namespace": stage.ns},
        "spec": spec,
    }))
    .unwrap();
    rollouts(&stage.client, &stage.ns)
        .create(&PostParams::default(), &rollout)
        .await
        .unwrap_or_else(|e| panic!("creating DataPlaneRollout {}/{name}: {e}", stage.ns));
}

async fn patch_rollout(stage: &Stage, name: &str, patch: Value) {
    rollouts(&stage.client, &stage.ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// What tells a rollout's progress: its conditions and each node's phase, reason and
/// blockers (no times).
fn progress(rollout: &DataPlaneRollout) -> String {
    let status = &rollout.status;
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={}({})", c.type_, c.status, c.reason))
        .collect();
    let nodes: Vec<String> = status
        .nodes
        .iter()
        .map(|n| format!("{}:{}/{}{:?}", n.name, n.phase, n.reason, n.blocked_by))
        .collect();
    format!(
        "revision {} upgraded {}/{}; {conditions:?}; {nodes:?}",
        status.revision, status.nodes_upgraded, status.nodes_total
    )
}

/// Until `done` holds of rollout `name`; fails when its status and the played world stop
/// changing for [`LIMIT`].
async fn wait_rollout(
    stage: &Stage,
    name: &str,
    what: &str,
    done: impl Fn(&DataPlaneRollout) -> bool,
) -> DataPlaneRollout {
    let api = rollouts(&stage.client, &stage.ns);
    eventually_async_every(
        LIMIT,
        STEP,
        &format!("DataPlaneRollout {}/{name}: {what}", stage.ns),
        async || {
            let rollout = api.get(name).await.map_err(|e| e.to_string())?;
            if done(&rollout) {
                Ok(rollout)
            } else {
                Err(format!(
                    "{}; {} moments seen",
                    progress(&rollout),
                    stage.moments().len()
                ))
            }
        },
        async || {
            let yaml = stage
                .kubectl
                .run(&["get", "dpr", "-n", &stage.ns, name, "-o", "yaml"])
                .stdout;
            format!("{yaml}\n{}", stage.table())
        },
    )
    .await
}

fn condition<'a>(rollout: &'a DataPlaneRollout, type_: &str) -> Option<&'a Condition> {
    rollout.status.conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(rollout: &DataPlaneRollout, type_: &str) -> bool {
    condition(rollout, type_).is_some_and(|c| c.status == "True")
}

fn node_status<'a>(rollout: &'a DataPlaneRollout, node: &str) -> Option<&'a NodeStatus> {
    rollout.status.nodes.iter().find(|n| n.name == node)
}

fn phase_of(rollout: &DataPlaneRollout, node: &str) -> String {
    node_status(rollout, node)
        .map(|n| n.phase.clone())
        .unwrap_or_default()
}

/// Until the rollout says Succeeded.
async fn wait_succeeded(stage: &Stage, name: &str) -> DataPlaneRollout {
    wait_rollout(stage, name, "Succeeded", |r| is_true(r, "Succeeded")).await
}

// ---- what the watches and the audit log saw ----

/// The most nodes (not in `exclude`) the Node watch saw cordoned at once.
fn max_cordoned_at_once(moments: &[Moment], exclude: &BTreeSet<String>) -> usize {
    let mut now: BTreeSet<String> = BTreeSet::new();
    let mut max = 0;
    for moment in moments {
        match &moment.what {
            What::Cordoned(node) if !exclude.contains(node) => {
                now.insert(node.clone());
            }
            What::Uncordoned(node) => {
                now.remove(node);
            }
            _ => {}
        }
        max = max.max(now.len());
    }
    max
}

/// The nodes (not in `exclude`) in the order the Node watch saw them cordoned.
fn cordon_order(moments: &[Moment], exclude: &BTreeSet<String>) -> Vec<String> {
    moments
        .iter()
        .filter_map(|m| match &m.what {
            What::Cordoned(node) if !exclude.contains(node) => Some(node.clone()),
            _ => None,
        })
        .collect()
}

/// Each cordon (not of `exclude`) seen while a replica was not `running` (a node cordoned
/// before the one before it was rebuilt): `node at t: replicas [...]`.
fn cordons_before_rebuilt(moments: &[Moment], exclude: &BTreeSet<String>) -> Vec<String> {
    let mut states: BTreeMap<String, String> = BTreeMap::new();
    let mut early = Vec::new();
    for moment in moments {
        match &moment.what {
            What::Replica { name, state } => {
                states.insert(name.clone(), state.clone());
            }
            What::Cordoned(node) if !exclude.contains(node) => {
                let down: Vec<&String> = states
                    .iter()
                    .filter(|(_, s)| *s == "error")
                    .map(|(n, _)| n)
                    .collect();
                if !down.is_empty() {
                    early.push(format!("{node} at {:?}: replicas {down:?}", moment.at));
                }
            }
            _ => {}
        }
    }
    early
}

/// The evictions of pods in `ns` the audit log holds, by pod: each answer's code, in order.
fn evictions(audit: &AuditLog, ns: &str) -> BTreeMap<String, Vec<u16>> {
    let prefix = format!("/api/v1/namespaces/{ns}/pods/");
    let mut out: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for request in audit.requests() {
        let Some(rest) = request.uri.strip_prefix(&prefix) else {
            continue;
        };
        let Some(pod) = rest
            .split('?')
            .next()
            .and_then(|p| p.strip_suffix("/eviction"))
        else {
            continue;
        };
        out.entry(pod.to_string()).or_default().push(request.code);
    }
    out
}

/// Evictions answered 201 (the pod was evicted), by pod.
fn evicted(audit: &AuditLog, ns: &str) -> BTreeMap<String, usize> {
    evictions(audit, ns)
        .into_iter()
        .map(|(pod, codes)| (pod, codes.iter().filter(|c| **c == 201).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// svm-apiserver's DELETEs of pods (it must only ever evict them).
fn svm_pod_deletes(audit: &AuditLog) -> Vec<AuditedRequest> {
    audit
        .requests()
        .into_iter()
        .filter(|r| r.user == SVM_USER && r.verb == "delete" && r.uri.contains("/pods/"))
        .collect()
}

/// svm-apiserver's eviction counts (`svm_data_plane_evictions_total`, since its start) are
/// what kube-apiserver's audit log holds of its evictions: accepted (201) and refused by a
/// budget (429), for data-plane and consumer pods.
async fn the_metrics_agree_with_the_audit_log(cluster: &RealCluster, audit: &AuditLog) {
    let mut audited: BTreeMap<(&str, u16), usize> = BTreeMap::new();
    for request in audit.requests().iter().filter(|r| r.user == SVM_USER) {
        let path = request.uri.split('?').next().unwrap_or_default();
        let Some(pod) = path.strip_suffix("/eviction") else {
            continue;
        };
        let name = pod.rsplit('/').next().unwrap_or_default();
        let kind = if name.starts_with(&format!("{DS}-")) {
            "data-plane"
        } else {
            "consumer"
        };
        *audited.entry((kind, request.code)).or_default() += 1;
    }
    let metrics = cluster.metrics().await;
    println!("svm-apiserver's evictions, audited (kind, code → count): {audited:?}");
    let ours = |l: &&str| l.starts_with("svm_data_plane_") && !l.contains("rollout_nodes");
    for line in metrics.lines().filter(ours) {
        println!("  {line}");
    }
    for kind in ["data-plane", "consumer"] {
        for (result, code) in [("accepted", 201), ("budget", 429)] {
            let counted = crate::support::server::metric_sum(
                &metrics,
                "svm_data_plane_evictions_total",
                &[&format!("pod=\"{kind}\""), &format!("result=\"{result}\"")],
            );
            let seen = audited.get(&(kind, code)).copied().unwrap_or(0);
            assert_eq!(counted as usize, seen, "{kind} {result}: {audited:?}");
        }
    }
}

/// Each node's steps are Events on the Node too, as `kubectl describe node` shows them
/// (docs/data-plane.md): looked at last, on a node of `dp-everywhere`.
fn events_on_nodes(world: &World<'_>) {
    let node = "dp-everywhere-node-3";
    let described = world.kubectl.ok(&["describe", "node", node]);
    let selector = format!("involvedObject.kind=Node,involvedObject.name={node}");
    let listed = world.kubectl.ok(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &selector,
        "-o",
        "custom-columns=NAMESPACE:.metadata.namespace,REASON:.reason,UID:.involvedObject.uid,\
         KIND:.involvedObject.kind,NAME:.involvedObject.name",
    ]);
    println!("Events about Node {node}:\n{listed}");
    // The steps every node goes through (WaitingForPod and Rebuilding only when a pass saw
    // them).
    for reason in ["Cordoned", "Evicting", "Upgraded"] {
        assert!(
            described.contains(reason),
            "{reason} on Node {node} (kubectl describe node): {described}\nits Events: {listed}"
        );
    }
}

/// Print what svm-apiserver wrote to pods and Nodes, by verb and code.
fn print_svm_writes(audit: &AuditLog) {
    let mut counts: BTreeMap<(String, String, u16), usize> = BTreeMap::new();
    for r in audit.requests().into_iter().filter(|r| r.user == SVM_USER) {
        let what = if r.uri.contains("/eviction") {
            "pods/eviction"
        } else if r.uri.contains("/nodes/") {
            "nodes"
        } else {
            "pods"
        };
        *counts
            .entry((r.verb.clone(), what.to_string(), r.code))
            .or_default() += 1;
    }
    println!("svm-apiserver's writes to pods and Nodes (audit log):");
    for ((verb, what, code), n) in counts {
        println!("  {verb:<8} {what:<14} {code} x{n}");
    }
}

/// The claim annotations still on the stage's Nodes.
async fn claims_left(stage: &Stage) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(stage.client.clone());
    let mut left = BTreeMap::new();
    for name in &stage.nodes {
        let node = nodes.get(name).await.unwrap();
        if let Some(claim) = node
            .metadata
            .annotations
            .and_then(|a| a.get(CLAIM).cloned())
        {
            left.insert(name.clone(), claim);
        }
    }
    left
}

/// The end of every rollout that succeeds: every node Upgraded at `revision` and running a
/// Ready pod of it, the counts and revision said, every node released (no claim left, no
/// node of ours left cordoned but `admins`'), never two of ours cordoned at once, never one cordoned before the node before
/// it was rebuilt, each old pod evicted once and none deleted bare.
async fn assert_rolled_out(
    world: &World<'_>,
    stage: &Stage,
    rollout: &DataPlaneRollout,
    revision: &str,
    admins: &BTreeSet<String>,
) {
    let status = &rollout.status;
    let report = || format!("{}\n{}", progress(rollout), stage.table());
    assert_eq!(status.revision, revision, "{}", report());
    assert_eq!(
        status.nodes_total as usize,
        stage.nodes.len(),
        "{}",
        report()
    );
    assert_eq!(status.nodes_upgraded, status.nodes_total, "{}", report());
    for node in &stage.nodes {
        let entry = node_status(rollout, node).unwrap_or_else(|| panic!("{node}: {}", report()));
        assert_eq!(entry.phase, "Upgraded", "{node}: {}", report());
        assert_eq!(entry.revision, revision, "{node}: {}", report());
    }
    stage.wait_pods_of(DS, revision).await;
    // The status is written before the last release is sent: the release follows.
    stage::wait_until(stage, "every node released", |s| {
        s.cordoned() == *admins && s.claimed().is_empty()
    })
    .await;
    let moments = stage.moments();
    assert!(
        max_cordoned_at_once(&moments, admins) <= 1,
        "two of ours cordoned at once: {moments:#?}"
    );
    let early = cordons_before_rebuilt(&moments, admins);
    assert!(early.is_empty(), "cordoned before the rebuild: {early:?}");
    let evicted = evicted(world.audit, &stage.ns);
    for (pod, n) in &evicted {
        assert_eq!(*n, 1, "{pod} evicted {n} times: {evicted:?}");
    }
    let deletes = svm_pod_deletes(world.audit);
    assert!(deletes.is_empty(), "bare DELETEs of pods: {deletes:?}");
}

//! `recreateStatefulSet` crashed at every step, on the real kube-apiserver with the real
//! kube-controller-manager's StatefulSet controller and garbage collector (and the controllers
//! the other volume scenarios run, [`CONTROLLERS`]); the kubelet, binder and resizer are
//! played by [`Node`], as there.
//!
//! How a crash is placed at a step, deterministically: svm-apiserver is started with the
//! `SVM_TEST_VOLUME_HOOKS` of test builds (`crates/volumes/src/hooks.rs`), which makes
//! its controller stop acting on a named migration right after a step's write succeeded — the
//! status write that saved the manifest, the StatefulSet's deletion, its creation — and log
//! `test hook: halted after …`. The test waits for that line, looks at what the cluster and the
//! migration show, and kills the process with SIGKILL (as `crashes.rs` does); then it starts it
//! again without the hooks (the suite's own restart) and waits for the end state. Watching the
//! API for a step's effect and killing then would race the controller's next step (the status
//! write after a creation takes milliseconds); the halt leaves nothing to race, and the process
//! still serves our API, so the migration can be read (and deleted) at the crash point. The
//! suite's `ServerProcess` passes no environment, so the hooked process is started here, with
//! the same flags, port, certificates and store.
//!
//! One process carries every crash point at once, each in its own namespace, one SIGKILL for
//! all: after the save, after the deletion, after the creation; after the save with the
//! StatefulSet then edited by a user (replicas 2 → 3, an annotation); after the save and after
//! the deletion with the migration then deleted by a user; after the save with the StatefulSet
//! then deleted by its user (`kubectl delete`). And one point needs no crash: the deletion,
//! decided, waits (hook) until the user's edit lands, so it is sent with a stale
//! resourceVersion — the real 409 — and the manifest is saved again. Each point prints what it
//! found at the crash; each must end with the StatefulSet there, with the user's latest spec,
//! its pods adopted with their uids and its claims kept, the finalizer gone, nothing reverted —
//! but the one its user deleted, which must stay deleted (the migration failed, saying why).

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use serde_json::{Value, json};

use super::{CONTROLLERS, LIMIT, Node, STORAGE_CLASSES, condition, migration};
use crate::hooked::Hooked;
use crate::support::controller_manager::ControllerManager;
use crate::support::kubectl::Kubectl;
use crate::support::real_cluster::RealCluster;
use crate::support::wait::{POLL, eventually_async, eventually_async_every};

const TEST: &str = "volume_claim_migration_recreates_survive_sigkill_at_every_step";

/// The hooks' variable (`crates/volumes/src/hooks.rs`, compiled into test builds only).
const HOOKS: &str = "SVM_TEST_VOLUME_HOOKS";

/// The migration's finalizer while it holds a manifest.
const FINALIZER: &str = "storage.svm-apiserver.io/recreate-statefulset";

/// svm-apiserver's flags here: the volume controller alone, passes every second, and a short
/// lease so that a restarted process leads again after seconds (leader election stays on, so
/// the term checks before each cluster write are the production ones).
const SVM_FLAGS: [&str; 6] = [
    "--enable-volume-claim-migrations",
    "--volume-resync-interval=1s",
    "--controllers=volumes",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];

/// What a user does at a crash point, while the controller is halted there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum User {
    Nothing,
    /// Scales the StatefulSet to 3 and annotates it.
    EditsTheStatefulSet,
    /// Deletes the migration.
    DeletesTheMigration,
    /// Deletes the StatefulSet as `kubectl delete` does (background cascade): its owner
    /// removes the application, which must not come back.
    DeletesTheStatefulSet,
}

struct Point {
    ns: &'static str,
    hook: &'static str,
    user: User,
}

const POINTS: [Point; 8] = [
    Point {
        ns: "crash-after-save",
        hook: "halt-after-save",
        user: User::Nothing,
    },
    Point {
        ns: "crash-after-delete",
        hook: "halt-after-delete",
        user: User::Nothing,
    },
    Point {
        ns: "crash-after-create",
        hook: "halt-after-create",
        user: User::Nothing,
    },
    Point {
        ns: "crash-edited",
        hook: "halt-after-save",
        user: User::EditsTheStatefulSet,
    },
    Point {
        ns: "edit-races-delete",
        hook: "wait-for-edit-before-delete",
        user: User::EditsTheStatefulSet,
    },
    Point {
        ns: "deleted-after-save",
        hook: "halt-after-save",
        user: User::DeletesTheMigration,
    },
    Point {
        ns: "deleted-after-delete",
        hook: "halt-after-delete",
        user: User::DeletesTheMigration,
    },
    Point {
        ns: "sts-deleted-after-save",
        hook: "halt-after-save",
        user: User::DeletesTheStatefulSet,
    },
];

/// What a namespace held before the migration: its StatefulSet's uid, pods and claims.
struct Before {
    node: Node,
    uid: String,
    pods: BTreeMap<String, String>,
    claims: BTreeMap<String, String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_claim_migration_recreates_survive_sigkill_at_every_step() {
    let started = Instant::now();
    let Some(mut cluster) = RealCluster::start(TEST, &[], &SVM_FLAGS) else {
        return;
    };
    let kubectl = cluster.kubectl();
    kubectl.ok_stdin(&["apply", "-f", "-"], STORAGE_CLASSES);
    let _kcm = ControllerManager::start(&cluster.plane, &CONTROLLERS, &[]);
    let client = cluster.plane.client().await;
    let mut before = BTreeMap::new();
    for point in &POINTS {
        let node = Node::start(&client, &kubectl, point.ns, 2, &["data"], "expandable").await;
        let uid = node.statefulset_uid().await.expect("StatefulSet db");
        let pods = eventually_async(LIMIT, "the 2 pods of StatefulSet db", async || {
            let pods = node.owned_pods(&uid).await;
            if pods.len() == 2 {
                Ok(pods)
            } else {
                Err(format!("{pods:?}"))
            }
        })
        .await;
        let claims = node.claim_uids().await;
        before.insert(
            point.ns,
            Before {
                node,
                uid,
                pods,
                claims,
            },
        );
    }
    println!(
        "{} namespaces running after {:.1} s",
        POINTS.len(),
        started.elapsed().as_secs_f64()
    );

    // svm-apiserver again, with the hooks.
    cluster.svm.kill();
    let hooks: Vec<String> = POINTS
        .iter()
        .map(|p| format!("{}/grow={}", p.ns, p.hook))
        .collect();
    let hooked = Hooked::start(&cluster, &SVM_FLAGS, HOOKS, &hooks.join(","));
    cluster.wait_available();
    for point in &POINTS {
        let mut vcm: Value = serde_json::from_str(&migration(
            point.ns,
            "grow",
            "OnPodRollingUpdate",
            &[("data", "20Gi")],
        ))
        .expect("migration");
        vcm["spec"]["recreateStatefulSet"] = json!(true);
        kubectl.ok_stdin(&["create", "-f", "-"], &vcm.to_string());
    }

    // The users, at their points.
    hooked
        .wait_for(
            &span_of("edit-races-delete"),
            "test hook: waiting for an edit",
            LIMIT,
        )
        .await;
    edit(&kubectl, "edit-races-delete");
    hooked
        .wait_for(
            &span_of("edit-races-delete"),
            "the deletion's precondition failed",
            LIMIT,
        )
        .await;
    for point in &POINTS {
        if point.hook.starts_with("halt-after-") {
            let step = point.hook.trim_start_matches("halt-after-");
            hooked
                .wait_for(
                    &span_of(point.ns),
                    &format!("test hook: halted after {step}"),
                    LIMIT,
                )
                .await;
        }
        match point.user {
            User::EditsTheStatefulSet if point.hook != "wait-for-edit-before-delete" => {
                edit(&kubectl, point.ns)
            }
            User::DeletesTheMigration => {
                kubectl.ok(&["delete", "vcm", "-n", point.ns, "grow", "--wait=false"]);
            }
            User::DeletesTheStatefulSet => {
                kubectl.ok(&[
                    "delete",
                    "statefulset",
                    "-n",
                    point.ns,
                    "db",
                    "--wait=false",
                ]);
            }
            _ => {}
        }
    }
    // What each point shows at the crash.
    let mut at_crash: BTreeMap<&str, Option<String>> = BTreeMap::new();
    for point in &POINTS {
        let vcm = get_json(&kubectl, point.ns, "vcm", "grow");
        let sts = get_json(&kubectl, point.ns, "statefulset", "db");
        if point.user == User::DeletesTheMigration {
            assert!(
                vcm["metadata"]["deletionTimestamp"].is_string()
                    && finalizers(&vcm).contains(&FINALIZER.to_string()),
                "{}: the deleted migration is held by its finalizer: {vcm:#}",
                point.ns
            );
        }
        let uid = sts["metadata"]["uid"].as_str().map(str::to_string);
        println!(
            "crash point {:<22} ({}, user: {:?}): migration {}; StatefulSet {}",
            point.ns,
            point.hook,
            point.user,
            describe_migration(&vcm),
            describe_statefulset(&sts, &before[point.ns].uid),
        );
        at_crash.insert(point.ns, uid);
    }
    let crashed = Instant::now();
    hooked.kill();
    cluster.restart_svm();
    println!(
        "svm-apiserver killed with SIGKILL at every point and started again without hooks \
         ({:.1} s into the test)",
        started.elapsed().as_secs_f64()
    );

    for point in &POINTS {
        let was = &before[point.ns];
        if point.user == User::DeletesTheStatefulSet {
            stays_deleted(&kubectl, point.ns, &was.node).await;
            continue;
        }
        let edited = point.user == User::EditsTheStatefulSet;
        let called_off = point.ns == "deleted-after-save";
        // The migration's end: Succeeded with the manifest dropped and no finalizer, or, deleted
        // by its user, gone once the re-create was finished (or called off).
        let vcm = eventually_async_every(
            LIMIT,
            POLL,
            &format!("{}: the migration done (or gone, if deleted)", point.ns),
            async || {
                let vcm = get_json(&kubectl, point.ns, "vcm", "grow");
                let done = if point.user == User::DeletesTheMigration {
                    vcm.is_null()
                } else {
                    condition(&vcm, "Succeeded") == Some(("True".into(), "Resized".into()))
                        && vcm["status"]["recreate"]["phase"] == "Recreated"
                        && vcm["status"]["recreate"]["manifest"].is_null()
                        && !finalizers(&vcm).contains(&FINALIZER.to_string())
                };
                if done {
                    Ok(vcm)
                } else {
                    Err(format!("{vcm:#}"))
                }
            },
            async || {
                format!(
                    "{}\nsvm-apiserver log:\n{}",
                    was.node.table(),
                    cluster.svm.log()
                )
            },
        )
        .await;
        let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), point.ns);
        let sts = eventually_async(
            LIMIT,
            &format!("{}: StatefulSet db there and not being deleted", point.ns),
            async || match statefulsets.get_opt("db").await {
                Ok(Some(sts)) if sts.metadata.deletion_timestamp.is_none() => Ok(sts),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
        let uid = sts.metadata.uid.clone().unwrap_or_default();
        let spec = sts.spec.clone();
        let size = spec
            .volume_claim_templates
            .iter()
            .flatten()
            .filter_map(|t| {
                t.spec
                    .as_ref()?
                    .resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("storage")
            })
            .map(|q| q.0.clone())
            .collect::<Vec<_>>();
        if called_off {
            assert_eq!(
                uid, was.uid,
                "{}: called off, the StatefulSet untouched",
                point.ns
            );
            assert_eq!(size, ["10Gi"], "{}", point.ns);
        } else {
            assert_ne!(uid, was.uid, "{}: re-created", point.ns);
            assert_eq!(size, ["20Gi"], "{}: the new templates", point.ns);
        }
        if point.ns == "crash-after-create" {
            assert_eq!(
                Some(&uid),
                at_crash[point.ns].as_ref(),
                "created once: the object made before the crash is the one kept"
            );
        }
        // The user's latest spec, and never a replacement with the old one (what the watch saw
        // of the replacement when it appeared).
        let replicas = if edited { 3 } else { 2 };
        assert_eq!(spec.replicas, Some(replicas), "{}", point.ns);
        let annotated =
            sts.metadata.annotations.as_ref().is_some_and(|a| {
                a.get("example.test/edited").map(String::as_str) == Some("by-a-user")
            });
        assert_eq!(annotated, edited, "{}: the annotation", point.ns);
        if !called_off {
            assert_eq!(
                was.node.first_seen_replicas(&uid),
                Some(i64::from(replicas)),
                "{}: the replacement was created with the latest spec",
                point.ns
            );
        }
        // Pods adopted with their uids (plus db-2 for a scale-up), claims kept.
        let expected_pods = usize::try_from(replicas).unwrap_or_default();
        let pods = eventually_async(
            LIMIT,
            &format!("{}: every pod owned by StatefulSet {uid}", point.ns),
            async || {
                let owned = was.node.owned_pods(&uid).await;
                let kept = was
                    .pods
                    .iter()
                    .all(|(name, pod)| owned.get(name) == Some(pod));
                if kept && owned.len() == expected_pods {
                    Ok(owned)
                } else {
                    Err(format!("before {:?}, now {owned:?}", was.pods))
                }
            },
        )
        .await;
        let claims = was.node.claim_uids().await;
        assert!(
            was.claims
                .iter()
                .all(|(name, c)| claims.get(name) == Some(c)),
            "{}: claims kept: {:?} then {claims:?}",
            point.ns,
            was.claims
        );
        println!(
            "after the restart {:<22}: migration {}; StatefulSet {} ({}), replicas {replicas}, \
             {} pods adopted with their uids, {} claims kept",
            point.ns,
            if vcm.is_null() {
                "gone (its finalizer released)".to_string()
            } else {
                describe_migration(&vcm)
            },
            if called_off {
                "untouched"
            } else {
                "re-created"
            },
            size.join(","),
            pods.len(),
            claims.len(),
        );
    }
    for point in POINTS {
        if let Some(was) = before.remove(point.ns) {
            was.node.stop();
        }
    }
    println!(
        "every point recovered {:.1} s after the crash; the test took {:.1} s",
        crashed.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// The StatefulSet its user deleted after the save: the migration fails saying so, drops the
/// manifest and its finalizer — and so can create nothing any more — and the StatefulSet is
/// not there (its pods went with it, deleted by the garbage collector).
async fn stays_deleted(kubectl: &Kubectl, ns: &str, node: &Node) {
    let vcm = eventually_async_every(
        LIMIT,
        POLL,
        &format!("{ns}: the migration failed, its manifest dropped"),
        async || {
            let vcm = get_json(kubectl, ns, "vcm", "grow");
            let failed = condition(&vcm, "Failed")
                == Some(("True".into(), "StatefulSetDeletedElsewhere".into()));
            if failed
                && vcm["status"]["recreate"].is_null()
                && !finalizers(&vcm).contains(&FINALIZER.to_string())
            {
                Ok(vcm)
            } else {
                Err(format!("{vcm:#}"))
            }
        },
        async || node.table(),
    )
    .await;
    let sts = get_json(kubectl, ns, "statefulset", "db");
    assert!(sts.is_null(), "{ns}: the StatefulSet came back: {sts:#}");
    println!(
        "after the restart {ns:<22}: migration {}; StatefulSet not re-created",
        describe_migration(&vcm)
    );
}

/// The user's edit: 3 replicas and an annotation.
fn edit(kubectl: &Kubectl, ns: &str) {
    kubectl.ok(&[
        "patch",
        "statefulset",
        "db",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"example.test/edited":"by-a-user"}},"spec":{"replicas":3}}"#,
    ]);
}

/// The object as JSON, `null` when it does not exist.
fn get_json(kubectl: &Kubectl, ns: &str, kind: &str, name: &str) -> Value {
    let out = kubectl.run(&["get", kind, "-n", ns, name, "-o", "json"]);
    serde_json::from_str(&out.stdout).unwrap_or(Value::Null)
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

fn describe_migration(vcm: &Value) -> String {
    if vcm.is_null() {
        return "gone".into();
    }
    let recreate = &vcm["status"]["recreate"];
    format!(
        "phase {}, manifest {} (replicas {}), finalizers {:?}{}",
        recreate["phase"].as_str().unwrap_or("-"),
        if recreate["manifest"].is_object() {
            "saved"
        } else {
            "none"
        },
        recreate["manifest"]["spec"]["replicas"],
        finalizers(vcm),
        if vcm["metadata"]["deletionTimestamp"].is_string() {
            ", being deleted"
        } else {
            ""
        }
    )
}

fn describe_statefulset(sts: &Value, old_uid: &str) -> String {
    if sts.is_null() {
        return "gone".into();
    }
    let uid = sts["metadata"]["uid"].as_str().unwrap_or_default();
    format!(
        "{} uid, replicas {}{}",
        if uid == old_uid { "the old" } else { "a new" },
        sts["spec"]["replicas"],
        if sts["metadata"]["deletionTimestamp"].is_string() {
            ", being deleted (orphan)"
        } else {
            ""
        }
    )
}

/// How the controller's log names migration `<ns>/grow` (its span's fields).
fn span_of(ns: &str) -> String {
    format!("namespace={ns} name=grow")
}

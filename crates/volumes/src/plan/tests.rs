use svm_api::volumes::{
    ClaimStatus, ON_POD_ROLLING_UPDATE, Target, TemplateSize, VolumeClaimMigration,
    VolumeClaimMigrationSpec,
};

use super::*;

const GI: u128 = 1 << 30;

fn now() -> jiff::Timestamp {
    "2026-11-24T10:00:00Z".parse().unwrap()
}

fn vcm(strategy: &str, sizes: &[(&str, &str)]) -> VolumeClaimMigration {
    let mut vcm = VolumeClaimMigration {
        spec: VolumeClaimMigrationSpec {
            target: Target {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "db".into(),
            },
            templates: sizes
                .iter()
                .map(|(name, storage)| TemplateSize {
                    name: (*name).into(),
                    storage: (*storage).into(),
                })
                .collect(),
            volume_claim_update_strategy: strategy.into(),
            ..Default::default()
        },
        ..Default::default()
    };
    vcm.metadata.generation = Some(1);
    vcm
}

/// `replicas` ordinals of templates `data` and `logs` (10Gi each, StorageClass `fast`, which
/// expands), every claim bound at 10Gi, and the migration's sizes.
fn cluster(replicas: i32, desired: u128) -> Observed {
    let mut observed = Observed {
        replicas,
        ..Default::default()
    };
    for name in ["data", "logs"] {
        observed.templates.push(TemplateTarget {
            name: name.into(),
            storage: format!("{}Gi", desired / GI),
            bytes: desired,
            template_bytes: Some(10 * GI),
            in_target: true,
        });
        for ordinal in 0..replicas {
            observed.claims.insert(
                claim_name(name, "db", ordinal),
                ClaimView {
                    uid: format!("uid-{name}-{ordinal}"),
                    storage_class: Some("fast".into()),
                    requested: "10Gi".into(),
                    capacity: "10Gi".into(),
                    ..Default::default()
                },
            );
        }
    }
    observed.storage_classes.insert("fast".into(), true);
    observed
}

fn resized_claims(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Resize { claim, .. } => Some(claim.clone()),
            _ => None,
        })
        .collect()
}

fn condition<'a>(plan: &'a Plan, type_: &str) -> (&'a str, &'a str) {
    plan.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map_or(("", ""), |c| (c.status.as_str(), c.reason.as_str()))
}

/// The cluster after the resizer did its work on `claims`.
fn grown(mut observed: Observed, claims: &[String], to: &str) -> Observed {
    for name in claims {
        if let Some(claim) = observed.claims.get_mut(name) {
            claim.requested = to.into();
            claim.capacity = to.into();
        }
    }
    observed
}

/// Feeds each plan's status back, as the controller does.
fn next(mut vcm: VolumeClaimMigration, plan: &Plan) -> VolumeClaimMigration {
    vcm.status = plan.status.clone();
    vcm
}

#[test]
fn claims_grow_ordinal_by_ordinal_highest_first_both_templates_at_once() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = cluster(3, 20 * GI);
    let mut migration_now = migration;
    let mut order = Vec::new();
    for _ in 0..4 {
        let plan = plan(&migration_now, &observed, now());
        let started = resized_claims(&plan);
        order.push(started.clone());
        observed = grown(observed, &started, "20Gi");
        migration_now = next(migration_now, &plan);
    }
    assert_eq!(
        order,
        vec![
            vec!["data-db-2".to_string(), "logs-db-2".to_string()],
            vec!["data-db-1".into(), "logs-db-1".into()],
            vec!["data-db-0".into(), "logs-db-0".into()],
            vec![],
        ]
    );
    let done = plan(&migration_now, &observed, now());
    assert_eq!(condition(&done, SUCCEEDED), ("True", "Resized"));
    assert_eq!(condition(&done, RUNNING), ("False", "Succeeded"));
    for template in &done.status.templates {
        assert_eq!(
            (
                template.compatible_replicas,
                template.compatible_ready_replicas
            ),
            (3, 3)
        );
    }
    assert_eq!(done.status.observed_generation, Some(1));
}

#[test]
fn the_first_pass_counts_issued_resizes_and_says_running() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let plan = plan(&migration, &cluster(3, 20 * GI), now());
    for template in &plan.status.templates {
        assert_eq!(
            (
                template.compatible_replicas,
                template.compatible_ready_replicas
            ),
            (1, 0),
            "{template:?}"
        );
    }
    assert_eq!(condition(&plan, RUNNING), ("True", "Resizing"));
    let started = plan
        .status
        .claims
        .iter()
        .find(|c| c.name == "data-db-2")
        .unwrap();
    assert_eq!(
        (started.phase.as_str(), started.requested.as_str()),
        (RESIZING, "20Gi")
    );
    assert_eq!(started.resize_start_time, now().to_string());
}

#[test]
fn max_unavailable_opens_that_many_ordinals_at_once() {
    let mut migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    migration.spec.max_unavailable = Some(2);
    let plan = plan(&migration, &cluster(3, 20 * GI), now());
    assert_eq!(
        resized_claims(&plan),
        vec!["data-db-2", "logs-db-2", "data-db-1", "logs-db-1"]
    );
}

#[test]
fn a_class_that_does_not_expand_is_refused_up_front() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = cluster(2, 20 * GI);
    observed.storage_classes.insert("fast".into(), false);
    let plan = plan(&migration, &observed, now());
    assert!(plan.actions.is_empty());
    assert_eq!(condition(&plan, FAILED), ("True", "ExpansionNotAllowed"));
    assert!(
        plan.notes
            .iter()
            .any(|n| n.warning && n.reason == "ExpansionNotAllowed" && n.message.contains("fast")),
        "{:?}",
        plan.notes
    );
    // Refused, the claims are still reported.
    assert_eq!(plan.status.claims.len(), 4);
}

#[test]
fn a_missing_class_and_a_shrink_are_refused() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = cluster(1, 20 * GI);
    observed.storage_classes.clear();
    assert_eq!(
        condition(&plan(&migration, &observed, now()), FAILED),
        ("True", "ExpansionNotAllowed")
    );
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "5Gi"), ("logs", "5Gi")]);
    let shrink = plan(&migration, &cluster(1, 5 * GI), now());
    assert!(shrink.actions.is_empty());
    assert_eq!(condition(&shrink, FAILED), ("True", "ShrinkNotAllowed"));
}

#[test]
fn an_unknown_template_is_refused() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi")]);
    let mut observed = cluster(1, 20 * GI);
    observed.templates.retain(|t| t.name == "data");
    observed.templates[0].name = "nope".into();
    observed.templates[0].in_target = false;
    let plan = plan(&migration, &observed, now());
    assert_eq!(condition(&plan, FAILED), ("True", "UnknownTemplate"));
    assert!(plan.actions.is_empty());
}

#[test]
fn a_file_system_resize_restarts_the_pod_once_and_waits_for_it_to_come_back_ready() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = grown(
        cluster(1, 20 * GI),
        &["data-db-0".into(), "logs-db-0".into()],
        "20Gi",
    );
    observed
        .claims
        .get_mut("data-db-0")
        .unwrap()
        .fs_resize_pending = true;
    let pod = |uid: &str, ready| PodView {
        uid: uid.into(),
        ready,
    };
    observed.pods.insert("db-0".into(), pod("pod-a", true));

    let first = plan(&migration, &observed, now());
    assert_eq!(
        first.actions,
        vec![Action::RestartPod {
            pod: "db-0".into(),
            uid: "pod-a".into(),
            claim: "data-db-0".into()
        }]
    );
    let migration = next(migration, &first);
    // The old pod still there: deleted once, not again.
    let again = plan(&migration, &observed, now());
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    assert_eq!(condition(&again, SUCCEEDED).0, "False");
    // Back with a new uid, not ready yet; then ready with the file system grown.
    observed
        .claims
        .get_mut("data-db-0")
        .unwrap()
        .fs_resize_pending = false;
    observed.pods.insert("db-0".into(), pod("pod-b", false));
    let migration = next(migration, &again);
    let starting = plan(&migration, &observed, now());
    assert_eq!(condition(&starting, SUCCEEDED).0, "False");
    observed.pods.insert("db-0".into(), pod("pod-b", true));
    let migration = next(migration, &starting);
    let done = plan(&migration, &observed, now());
    assert_eq!(condition(&done, SUCCEEDED), ("True", "Resized"));
}

#[test]
fn an_ambiguous_resize_fails_after_max_wait_time_and_stops_the_rollout() {
    let mut migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    migration.spec.max_wait_time = "60s".into();
    let observed = cluster(3, 20 * GI);
    let first = plan(&migration, &observed, now());
    let mut observed = observed;
    for claim in resized_claims(&first) {
        // The resizer took the request and did nothing else.
        observed.claims.get_mut(&claim).unwrap().requested = "20Gi".into();
    }
    let migration = next(migration, &first);
    let soon = plan(
        &migration,
        &observed,
        now() + jiff::SignedDuration::from_secs(30),
    );
    assert!(soon.actions.is_empty());
    assert_eq!(condition(&soon, RUNNING), ("True", "Resizing"));
    let migration = next(migration, &soon);
    let late = plan(
        &migration,
        &observed,
        now() + jiff::SignedDuration::from_secs(61),
    );
    assert!(late.actions.is_empty(), "no later ordinal starts");
    assert_eq!(condition(&late, FAILED), ("True", "ResizeTimedOut"));
    assert!(
        late.notes
            .iter()
            .any(|n| n.warning && n.reason == "ResizeTimedOut")
    );
    let claim = late
        .status
        .claims
        .iter()
        .find(|c| c.name == "data-db-2")
        .unwrap();
    assert_eq!(claim.phase, CLAIM_FAILED);
    assert!(
        claim.last_error.contains("maxWaitTime"),
        "{}",
        claim.last_error
    );
}

#[test]
fn an_infeasible_resize_blocks_the_rollout() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = cluster(3, 20 * GI);
    let claim = observed.claims.get_mut("data-db-2").unwrap();
    claim.requested = "20Gi".into();
    claim.infeasible = Some("ControllerResizeInfeasible: no space".into());
    let plan = plan(&migration, &observed, now());
    assert!(resized_claims(&plan).is_empty(), "nothing else starts");
    assert_eq!(condition(&plan, RUNNING), ("False", "Blocked"));
    assert!(
        plan.notes
            .iter()
            .any(|n| n.warning && n.reason == "ResizeFailed")
    );
}

/// 100Gi failed at ordinal 2 after 4 and 3 got it; the spec is lowered to 20Gi: 4 and 3 stay,
/// 2 is lowered to 20Gi (allowed: 20Gi ≥ its capacity), then 1 and 0 go to 20Gi.
#[test]
fn a_size_lowered_after_a_failure_is_honoured() {
    let mut migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi")]);
    migration.metadata.generation = Some(2);
    let mut observed = cluster(5, 20 * GI);
    observed.templates.retain(|t| t.name == "data");
    observed.claims.retain(|name, _| name.starts_with("data-"));
    observed = grown(observed, &["data-db-4".into(), "data-db-3".into()], "100Gi");
    let failed = observed.claims.get_mut("data-db-2").unwrap();
    failed.requested = "100Gi".into();
    // The resizer's mark stays until the request changes; it is about 100Gi, not 20Gi.
    failed.infeasible = Some("ControllerResizeInfeasible: no space".into());
    let plan_now = plan(&migration, &observed, now());
    assert_eq!(condition(&plan_now, FAILED).0, "False", "not a shrink");
    assert_eq!(
        plan_now.actions,
        vec![Action::Resize {
            claim: "data-db-2".into(),
            storage: "20Gi".into(),
            resource_version: String::new(),
        }]
    );
    let counts = &plan_now.status.templates[0];
    assert_eq!(
        (counts.compatible_replicas, counts.compatible_ready_replicas),
        (3, 2)
    );
}

#[test]
fn on_delete_touches_nothing_until_a_claim_is_recreated() {
    let migration = vcm("", &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = cluster(2, 20 * GI);
    let first = plan(&migration, &observed, now());
    assert!(first.actions.is_empty());
    // Every claim's uid is remembered.
    assert!(
        first
            .status
            .claims
            .iter()
            .all(|c| c.uid.starts_with("uid-"))
    );
    let migration = next(migration, &first);
    observed.claims.get_mut("logs-db-0").unwrap().uid = "uid-new".into();
    let after = plan(&migration, &observed, now());
    assert_eq!(resized_claims(&after), vec!["logs-db-0"]);
    let entry = after
        .status
        .claims
        .iter()
        .find(|c| c.name == "logs-db-0")
        .unwrap();
    assert_eq!(entry.uid, "uid-new");
}

#[test]
fn paused_reports_and_touches_nothing() {
    let mut migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    migration.spec.paused = true;
    let plan = plan(&migration, &cluster(2, 20 * GI), now());
    assert!(plan.actions.is_empty());
    assert_eq!(condition(&plan, PAUSED), ("True", "Paused"));
    assert_eq!(plan.status.claims.len(), 4);
}

#[test]
fn a_claim_not_created_yet_is_pending_and_never_done() {
    let migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = grown(
        cluster(1, 20 * GI),
        &["data-db-0".into(), "logs-db-0".into()],
        "20Gi",
    );
    observed.claims.remove("logs-db-0");
    let plan = plan(&migration, &observed, now());
    let logs: &ClaimStatus = plan
        .status
        .claims
        .iter()
        .find(|c| c.name == "logs-db-0")
        .unwrap();
    assert_eq!(logs.phase, PENDING);
    assert_eq!(condition(&plan, SUCCEEDED).0, "False");
}

/// Every claim resized and `recreateStatefulSet`: the manifest is saved first, the old
/// object deleted on the next pass, the saved one created once it is gone; Succeeded only
/// when the replacement exists.
#[test]
fn recreate_saves_deletes_creates_and_only_then_succeeds() {
    let mut migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    migration.spec.recreate_stateful_set = true;
    let mut observed = grown(
        cluster(1, 20 * GI),
        &["data-db-0".into(), "logs-db-0".into()],
        "20Gi",
    );
    let served = |uid: &str, size: &str| super::super::recreate::Seen {
        uid: uid.into(),
        resource_version: "5".into(),
        deleting: false,
        orphaning: false,
        object: serde_json::json!({"metadata": {"name": "db", "uid": uid},
            "spec": {"volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": size}}}},
                {"metadata": {"name": "logs"}, "spec": {"resources": {"requests": {"storage": size}}}}]}}),
    };
    observed.statefulset = Some(served("old", "10Gi"));
    let saving = plan(&migration, &observed, now());
    assert!(saving.actions.is_empty(), "nothing deleted before the save");
    assert_eq!(
        condition(&saving, RUNNING),
        ("True", "RecreatingStatefulSet")
    );
    assert_eq!(
        condition(&saving, SUCCEEDED),
        ("False", "RecreatingStatefulSet")
    );
    assert!(saving.saves_manifest && saving.needs_finalizer());
    let migration = next(migration, &saving);
    let deleting = plan(&migration, &observed, now());
    assert_eq!(
        deleting.actions,
        vec![Action::DeleteStatefulSet {
            uid: "old".into(),
            resource_version: "5".into()
        }]
    );
    assert!(!deleting.saves_manifest && deleting.needs_finalizer());
    observed.statefulset = None;
    let creating = plan(&migration, &observed, now());
    let Some(Action::CreateStatefulSet { manifest }) = creating.actions.first() else {
        panic!("{:?}", creating.actions);
    };
    assert_eq!(
        manifest["spec"]["volumeClaimTemplates"][1]["spec"]["resources"]["requests"]["storage"],
        "20Gi"
    );
    observed.statefulset = Some(served("new", "20Gi"));
    let done = plan(&migration, &observed, now());
    assert!(done.actions.is_empty());
    assert!(
        !done.needs_finalizer(),
        "the manifest is dropped, and the finalizer with it"
    );
    assert_eq!(condition(&done, SUCCEEDED), ("True", "Resized"));
    assert_eq!(
        done.status.recreate.as_ref().map(|r| r.phase.as_str()),
        Some(svm_api::volumes::RECREATE_DONE)
    );
    assert!(
        done.notes
            .iter()
            .any(|n| n.reason == "StatefulSetRecreated")
    );
}

/// A migration with a saved manifest, its claims resized, its StatefulSet `db` at `uid`
/// (`None`: gone).
fn mid_recreate(uid: Option<&str>) -> (VolumeClaimMigration, Observed) {
    let mut migration = vcm(ON_POD_ROLLING_UPDATE, &[("data", "20Gi"), ("logs", "20Gi")]);
    migration.spec.recreate_stateful_set = true;
    let mut observed = grown(
        cluster(1, 20 * GI),
        &["data-db-0".into(), "logs-db-0".into()],
        "20Gi",
    );
    let object = serde_json::json!({"metadata": {"name": "db", "uid": "old"},
        "spec": {"replicas": 1, "volumeClaimTemplates": [
            {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}},
            {"metadata": {"name": "logs"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}]}});
    observed.statefulset = Some(super::super::recreate::Seen {
        uid: "old".into(),
        resource_version: "5".into(),
        deleting: false,
        orphaning: false,
        object,
    });
    let saving = plan(&migration, &observed, now());
    let migration = next(migration, &saving);
    match uid {
        None => observed.statefulset = None,
        Some(uid) => {
            if let Some(seen) = observed.statefulset.as_mut() {
                seen.uid = uid.into();
            }
        }
    }
    (migration, observed)
}

/// Deleting the migration mid-re-create: a StatefulSet already deleted is created first (the
/// finalizer stays until then); one not deleted yet is left alone and the re-create called off;
/// either way nothing else is touched, and the finalizer goes once no manifest is held.
#[test]
fn a_migration_deleted_mid_recreate_finishes_or_calls_it_off() {
    let deleted_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let (mut migration, observed) = mid_recreate(None);
    migration.metadata.deletion_timestamp = deleted_at.clone();
    let finishing = plan(&migration, &observed, now());
    assert!(
        matches!(
            finishing.actions.as_slice(),
            [Action::CreateStatefulSet { .. }]
        ),
        "{:?}",
        finishing.actions
    );
    assert!(finishing.needs_finalizer());
    assert_eq!(
        condition(&finishing, RUNNING),
        ("True", "RecreatingStatefulSet")
    );
    let (mut migration, mut observed) = mid_recreate(Some("new"));
    migration.metadata.deletion_timestamp = deleted_at.clone();
    let done = plan(&migration, &observed, now());
    assert!(done.actions.is_empty() && !done.needs_finalizer());
    observed.statefulset = observed.statefulset.map(|mut s| {
        s.uid = "old".into();
        s
    });
    let called_off = plan(&migration, &observed, now());
    assert!(called_off.actions.is_empty(), "{:?}", called_off.actions);
    assert_eq!(called_off.status.recreate, None);
    assert!(!called_off.needs_finalizer());
    assert!(
        called_off
            .notes
            .iter()
            .any(|n| n.reason == "RecreateCalledOff")
    );
}

/// Paused (or no longer asking) with the StatefulSet deleted: it is created all the same.
#[test]
fn pausing_never_leaves_the_statefulset_missing() {
    let (mut migration, observed) = mid_recreate(None);
    migration.spec.paused = true;
    let paused = plan(&migration, &observed, now());
    assert!(
        matches!(
            paused.actions.as_slice(),
            [Action::CreateStatefulSet { .. }]
        ),
        "{:?}",
        paused.actions
    );
    assert_eq!(condition(&paused, PAUSED), ("True", "Paused"));
    migration.spec.paused = false;
    migration.spec.recreate_stateful_set = false;
    let unasked = plan(&migration, &observed, now());
    assert!(
        matches!(
            unasked.actions.as_slice(),
            [Action::CreateStatefulSet { .. }]
        ),
        "{:?}",
        unasked.actions
    );
}

/// `OnDelete`: a claim made again from its template is resized once the binder bound it (no
/// request change on an unbound claim: kube-apiserver refuses it), and stays eligible until
/// then.
#[test]
fn on_delete_waits_for_a_recreated_claim_to_be_bound() {
    let migration = vcm("", &[("data", "20Gi"), ("logs", "20Gi")]);
    let mut observed = cluster(1, 20 * GI);
    let migration = next(migration.clone(), &plan(&migration, &observed, now()));
    let claim = observed.claims.get_mut("data-db-0").unwrap();
    claim.uid = "uid-again".into();
    claim.capacity.clear();
    let unbound = plan(&migration, &observed, now());
    assert!(unbound.actions.is_empty(), "{:?}", unbound.actions);
    let migration = next(migration, &unbound);
    observed.claims.get_mut("data-db-0").unwrap().capacity = "10Gi".into();
    assert_eq!(
        resized_claims(&plan(&migration, &observed, now())),
        vec!["data-db-0"]
    );
}

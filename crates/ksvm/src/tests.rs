use super::*;
use svm_api::migration::StorageVersionMigration as InternalMigration;
use svm_api::names::is_imported_history;

fn ksvm_state(
    name: &str,
    group: &str,
    resource: &str,
    persisted: &[&str],
    current: &str,
) -> StorageState {
    StorageState {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: StorageStateSpec {
            resource: GroupResource {
                group: group.into(),
                resource: resource.into(),
            },
        },
        status: StorageStateStatus {
            persisted_storage_version_hashes: persisted.iter().map(|s| s.to_string()).collect(),
            current_storage_version_hash: current.into(),
            last_heartbeat_time: Some("2026-11-20T10:00:00Z".into()),
        },
    }
}

fn ksvm_migration(name: &str, resource: &str, condition: Option<&str>) -> StorageVersionMigration {
    StorageVersionMigration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: MigrationSpec {
            resource: GroupVersionResource {
                group: "apps".into(),
                version: "v1".into(),
                resource: resource.into(),
            },
            continue_token: "their-token".into(),
        },
        status: MigrationStatus {
            conditions: condition
                .map(|c| MigrationCondition {
                    type_: c.into(),
                    status: "True".into(),
                    last_update_time: Some("2026-11-19T08:00:00Z".into()),
                    reason: String::new(),
                    message: String::new(),
                })
                .into_iter()
                .collect(),
        },
    }
}

#[test]
fn new_storagestates_keep_every_hash_ksvm_knew_and_take_our_names() {
    let plan = plan(
        &[
            // Named as KSVM's trigger names them (as we do): `<resource>` for the core group.
            ksvm_state("secrets", "", "secrets", &["A", "B"], "B"),
            ksvm_state("deployments.apps", "apps", "deployments", &[], "D"),
        ],
        &[],
        &[],
        &[],
    );
    let names: Vec<&str> = plan.states.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["deployments.apps", "secrets"]);
    let secrets = &plan.states[1];
    assert_eq!(secrets.action, Action::Create);
    assert_eq!(
        secrets.object.status.persisted_storage_version_hashes,
        ["A", "B"]
    );
    assert_eq!(secrets.object.status.current_storage_version_hash, "B");
    assert_eq!(
        secrets
            .object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(IMPORTED_UID_ANNOTATION))
            .map(String::as_str),
        Some("uid-secrets")
    );
    // No persisted hashes means Unknown (KSVM's default), plus the current one.
    assert_eq!(
        plan.states[0]
            .object
            .status
            .persisted_storage_version_hashes,
        ["Unknown", "D"]
    );
    assert!(plan.changes());
}

#[test]
fn an_existing_storagestate_gains_ksvms_hashes_and_never_loses_its_own() {
    let ours = StorageState {
        metadata: ObjectMeta {
            name: Some("deployments.apps".into()),
            resource_version: Some("42".into()),
            ..Default::default()
        },
        spec: StorageStateSpec {
            resource: GroupResource {
                group: "apps".into(),
                resource: "deployments".into(),
            },
        },
        status: StorageStateStatus {
            persisted_storage_version_hashes: vec!["Unknown".into(), "D".into()],
            current_storage_version_hash: "D".into(),
            last_heartbeat_time: None,
        },
    };
    let ksvm = ksvm_state("deployments.apps", "apps", "deployments", &["C", "D"], "D");
    let p = plan(
        std::slice::from_ref(&ksvm),
        &[],
        std::slice::from_ref(&ours),
        &[],
    );
    assert_eq!(p.states[0].action, Action::AddHashes(vec!["C".into()]));
    assert_eq!(
        p.states[0].object.status.persisted_storage_version_hashes,
        ["Unknown", "D", "C"]
    );
    assert_eq!(
        p.states[0].object.metadata.resource_version.as_deref(),
        Some("42")
    );
    // Once merged, importing again changes nothing.
    let merged = p.states[0].object.clone();
    let again = plan(&[ksvm], &[], &[merged], &[]);
    assert_eq!(again.states[0].action, Action::Unchanged);
    assert!(!again.changes());
}

#[test]
fn finished_migrations_become_history_and_unfinished_ones_run_here() {
    let p = plan(
        &[],
        &[
            ksvm_migration("done", "deployments", Some("Succeeded")),
            ksvm_migration("broken", "replicasets", Some("Failed")),
            ksvm_migration("halfway", "daemonsets", Some("Running")),
        ],
        &[],
        &[],
    );
    let by_name: BTreeMap<&str, &MigrationPlan> =
        p.migrations.iter().map(|m| (m.name.as_str(), m)).collect();
    let done = by_name["done"];
    assert_eq!(
        (done.action.clone(), done.imported_as),
        (Action::Create, "Succeeded")
    );
    assert_eq!(done.object.status.conditions.len(), 1);
    assert_eq!(
        done.object.spec.continue_token, "",
        "KSVM's token is not ours"
    );
    let annotations = done.object.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(IMPORTED_HISTORY_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(by_name["broken"].imported_as, "Failed");
    let halfway = by_name["halfway"];
    assert_eq!(halfway.imported_as, "Pending");
    assert!(
        halfway.object.status.conditions.is_empty(),
        "the migrator here starts it afresh"
    );
    assert!(
        !halfway
            .object
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .contains_key(IMPORTED_HISTORY_ANNOTATION)
    );
}

#[test]
fn imported_migrations_are_unchanged_the_second_time_and_strangers_are_skipped() {
    let ksvm = [
        ksvm_migration("done", "deployments", Some("Succeeded")),
        ksvm_migration("clash", "replicasets", None),
    ];
    let first = plan(&[], &ksvm, &[], &[]);
    let mut ours: Vec<StorageVersionMigration> =
        first.migrations.iter().map(|m| m.object.clone()).collect();
    // "clash" here is someone else's.
    ours[0].metadata.annotations = None;
    let second = plan(&[], &ksvm, &[], &ours);
    let actions: Vec<(&str, &Action)> = second
        .migrations
        .iter()
        .map(|m| (m.name.as_str(), &m.action))
        .collect();
    assert!(
        matches!(actions[0], ("clash", Action::Skip(_))),
        "{actions:?}"
    );
    assert_eq!(actions[1], ("done", &Action::Unchanged));
    // History created but its status never written (an interrupted run): written now.
    ours[1].status = MigrationStatus::default();
    let resumed = plan(&[], &ksvm, &[], &ours);
    assert_eq!(resumed.migrations[1].action, Action::WriteStatus);
}

/// What an import before the rename made carries the old spelling of KSVM's uid: a second
/// import after the upgrade still finds it its own, and writes the new names on what it makes.
#[test]
fn a_second_import_recognises_what_an_import_before_the_rename_made() {
    let ksvm = [ksvm_migration("done", "deployments", Some("Succeeded"))];
    let first = plan(&[], &ksvm, &[], &[]);
    let mut ours: Vec<StorageVersionMigration> =
        first.migrations.iter().map(|m| m.object.clone()).collect();
    let annotations = ours[0].metadata.annotations.get_or_insert_default();
    let uid = annotations
        .remove(IMPORTED_UID_ANNOTATION)
        .expect("imported uid");
    annotations.insert("storagemigration.k8s.io/imported-from-ksvm-uid".into(), uid);
    let second = plan(&[], &ksvm, &[], &ours);
    assert_eq!(second.migrations[0].action, Action::Unchanged);
    let written = first.migrations[0].object.metadata.annotations.clone();
    assert!(
        written
            .unwrap_or_default()
            .keys()
            .all(|k| k.starts_with("storage.svm-apiserver.io/")),
        "only the new names are written"
    );
}

#[test]
fn history_is_never_run_by_the_migrator() {
    let p = plan(
        &[],
        &[ksvm_migration("done", "deployments", Some("Succeeded"))],
        &[],
        &[],
    );
    let internal = InternalMigration {
        metadata: p.migrations[0].object.metadata.clone(),
        ..Default::default()
    };
    assert!(is_imported_history(&internal.metadata));
    assert!(!is_imported_history(&InternalMigration::default().metadata));
}

#[test]
fn the_rendered_plan_names_every_object_and_its_action() {
    let p = plan(
        &[ksvm_state("secrets", "", "secrets", &["A"], "A")],
        &[ksvm_migration("done", "deployments", Some("Succeeded"))],
        &[],
        &[],
    );
    let text = render(&p, true);
    assert!(text.contains("(dry run: nothing is written)"), "{text}");
    assert!(
        text.contains("storagestate/secrets: create (persisted A, current A)"),
        "{text}"
    );
    assert!(
        text.contains(
            "storageversionmigration/done: create (deployments.apps, history, Succeeded)"
        ),
        "{text}"
    );
}

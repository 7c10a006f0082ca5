use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::migration::{
    GroupVersionResource, MigrationCondition, MigrationProgress, MigrationSpec,
};

fn svm(group: &str, resource: &str) -> StorageVersionMigration {
    StorageVersionMigration {
        metadata: ObjectMeta {
            name: Some("m".into()),
            ..Default::default()
        },
        spec: MigrationSpec {
            resource: GroupVersionResource {
                group: group.into(),
                version: String::new(),
                resource: resource.into(),
            },
            continue_token: String::new(),
        },
        status: Default::default(),
    }
}

fn condition(type_: &str, status: &str) -> MigrationCondition {
    MigrationCondition {
        type_: type_.into(),
        status: status.into(),
        reason: "Because".into(),
        ..Default::default()
    }
}

fn fields(errs: &[FieldError]) -> Vec<&str> {
    errs.iter().map(|e| e.field.as_str()).collect()
}

#[test]
fn spec_validation() {
    let s = MigrationStrategy;
    assert!(s.validate(&svm("apps", "deployments")).is_empty());
    assert!(s.validate(&svm("", "secrets")).is_empty());
    assert_eq!(
        fields(&s.validate(&svm("apps", ""))),
        ["spec.resource.resource"]
    );
    assert_eq!(s.validate(&svm("apps", ""))[0].reason, "FieldValueRequired");
    assert_eq!(
        fields(&s.validate(&svm("apps", "Deployments"))),
        ["spec.resource.resource"]
    );
    assert_eq!(
        fields(&s.validate(&svm("Apps_", "deployments"))),
        ["spec.resource.group"]
    );
    let mut bad_version = svm("apps", "deployments");
    bad_version.spec.resource.version = "V1".into();
    assert_eq!(fields(&s.validate(&bad_version)), ["spec.resource.version"]);
}

#[test]
fn spec_is_immutable_and_status_is_kept_on_main_updates() {
    let s = MigrationStrategy;
    let mut old = svm("apps", "deployments");
    old.status.conditions.push(condition("Running", "True"));
    let mut new = svm("apps", "statefulsets");
    let errs = s.validate_update(&new, &old);
    assert_eq!(fields(&errs), ["spec"]);
    assert!(errs[0].message.contains("field is immutable"));
    assert!(s.spec_changed(&new, &old));
    s.prepare_for_update(&mut new, &old);
    assert_eq!(new.status, old.status);
}

#[test]
fn create_clears_status_and_status_updates_keep_spec() {
    let s = MigrationStrategy;
    let mut obj = svm("apps", "deployments");
    obj.status.conditions.push(condition("Succeeded", "True"));
    s.prepare_for_create(&mut obj);
    assert!(obj.status.conditions.is_empty());

    let old = svm("apps", "deployments");
    let mut new = svm("", "pods");
    new.status.conditions.push(condition("Running", "True"));
    s.prepare_for_status_update(&mut new, &old);
    assert_eq!(new.spec, old.spec);
    // A missing transition time is defaulted.
    assert!(new.status.conditions[0].last_transition_time.is_some());
}

#[test]
fn condition_rules() {
    let s = MigrationStrategy;
    let old = svm("apps", "deployments");
    let with = |conds: Vec<MigrationCondition>| {
        let mut o = old.clone();
        o.status.conditions = conds;
        o
    };
    assert!(
        s.validate_status_update(&with(vec![condition("Running", "True")]), &old)
            .is_empty()
    );
    let both = with(vec![
        condition("Succeeded", "True"),
        condition("Failed", "True"),
    ]);
    assert!(
        s.validate_status_update(&both, &old)
            .iter()
            .any(|e| e.message.contains("Both success and failed"))
    );
    let running_done = with(vec![
        condition("Running", "True"),
        condition("Succeeded", "True"),
    ]);
    // kube-apiserver 1.36 accepts Running beside Succeeded (recording 18, step 8).
    assert!(s.validate_status_update(&running_done, &old).is_empty());
    let dup = with(vec![
        condition("Running", "True"),
        condition("Running", "False"),
    ]);
    assert_eq!(
        s.validate_status_update(&dup, &old)[0].reason,
        "FieldValueDuplicate"
    );
    let bad_status = with(vec![condition("Running", "Maybe")]);
    assert_eq!(
        s.validate_status_update(&bad_status, &old)[0].reason,
        "FieldValueNotSupported"
    );
    let mut bad_reason = condition("Running", "True");
    bad_reason.reason = "not a reason!".into();
    assert_eq!(
        fields(&s.validate_status_update(&with(vec![bad_reason]), &old)),
        ["status.conditions[0].reason"]
    );
    // Once Succeeded, always Succeeded.
    let done = with(vec![condition("Succeeded", "True")]);
    let undone = with(vec![condition("Succeeded", "False")]);
    assert!(
        s.validate_status_update(&undone, &done)
            .iter()
            .any(|e| e.message.contains("cannot be set to false"))
    );
    // status.resourceVersion is immutable once set.
    let mut set = old.clone();
    set.status.resource_version = "10".into();
    let mut changed = old.clone();
    changed.status.resource_version = "11".into();
    assert_eq!(
        fields(&s.validate_status_update(&changed, &set)),
        ["status.resourceVersion"]
    );
    assert!(s.validate_status_update(&set, &old).is_empty());
    // Negative progress is refused.
    let mut negative = old.clone();
    negative.status.progress = Some(MigrationProgress {
        migrated_objects: -1,
        ..Default::default()
    });
    assert_eq!(
        fields(&s.validate_status_update(&negative, &old)),
        ["status.progress.migratedObjects"]
    );
}

#[test]
fn reasons_follow_the_metav1_pattern() {
    for ok in ["A", "Completed", "Reason_A", "A,B", "A:B", "x_"] {
        assert!(reason_is_valid(ok), "{ok}");
    }
    for bad in ["", "1A", "A-B", "A,", "A:", "A B"] {
        assert!(!reason_is_valid(bad), "{bad}");
    }
}

#[test]
fn table_rows() {
    let s = MigrationStrategy;
    let mut obj = svm("apps", "deployments");
    let row = s.table_row(&obj);
    assert_eq!(row.len(), s.table_columns().len());
    assert_eq!(row[1], "deployments.apps");
    assert_eq!(row[2], "Pending");
    assert_eq!(row[3], 0);
    assert_eq!(row[4], "<unknown>");
    obj.status.conditions.push(condition("Running", "True"));
    obj.status.progress = Some(MigrationProgress {
        migrated_objects: 7,
        remaining_objects: Some(3),
        ..Default::default()
    });
    let row = s.table_row(&obj);
    assert_eq!(row[2], "Running");
    assert_eq!(row[3], 7);
    assert_eq!(row[4], "3");
    let core = svm("", "secrets");
    assert_eq!(s.table_row(&core)[1], "secrets");
}

#[test]
fn definitions_name_every_reference() {
    for v in crate::VERSIONS {
        let defs = MigrationStrategy.openapi_definitions(v);
        assert_eq!(defs[0].0, MigrationStrategy.definition_name(v));
        assert_eq!(
            defs[0].1["x-kubernetes-group-version-kind"][0]["version"],
            *v
        );
        let names: Vec<&str> = defs.iter().map(|(n, _)| n.as_str()).collect();
        let text = serde_json::to_string(&defs).unwrap();
        for reference in text.split("#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(
                names.contains(&name) || name.starts_with("io.k8s.apimachinery.pkg.apis.meta.v1."),
                "{v}: dangling reference {name}"
            );
        }
    }
}

#[test]
fn the_failure_policy_is_fail_or_skip_and_nothing_else() {
    let s = MigrationStrategy;
    let with = |value: &str| {
        let mut m = svm("apps", "deployments");
        m.metadata.annotations = Some(
            [(
                crate::migration::ON_OBJECT_FAILURE_ANNOTATION.to_string(),
                value.to_string(),
            )]
            .into(),
        );
        m
    };
    assert!(s.validate(&with("Skip")).is_empty());
    assert!(with("Skip").skips_refused_objects());
    assert!(s.validate(&with("Fail")).is_empty());
    assert!(!with("Fail").skips_refused_objects());
    assert!(!svm("apps", "deployments").skips_refused_objects());
    let errs = s.validate(&with("skip"));
    assert_eq!(
        fields(&errs),
        ["metadata.annotations[storage.svm-apiserver.io/on-object-failure]"]
    );
    assert_eq!(
        errs[0].message,
        r#"Unsupported value: "skip": supported values: "Fail", "Skip""#
    );
    let old = svm("apps", "deployments");
    assert_eq!(s.validate_update(&with("Never"), &old).len(), 1);
}

#[test]
fn the_wide_column_is_the_true_conditions_message() {
    let s = MigrationStrategy;
    let mut m = svm("apps", "deployments");
    assert_eq!(s.table_row(&m).last(), Some(&serde_json::json!("")));
    let mut running = condition("Running", "True");
    running.message = "migrated 5 of 10 objects (5 remaining, 0 failed)".into();
    m.status.conditions.push(running);
    let columns = s.table_columns();
    assert_eq!(
        columns.last().map(|c| (c.name, c.priority)),
        Some(("Message", 1))
    );
    assert_eq!(
        s.table_row(&m).last(),
        Some(&serde_json::json!(
            "migrated 5 of 10 objects (5 remaining, 0 failed)"
        ))
    );
}

#[test]
fn skipped_objects_keep_a_succeeded_migration_from_counting_as_complete() {
    let mut m = svm("apps", "deployments");
    m.status.conditions.push(condition("Succeeded", "True"));
    assert!(m.migrated_every_object());
    m.status
        .conditions
        .push(condition("ObjectsSkipped", "True"));
    assert!(!m.migrated_every_object());
}

fn checkpoint(migrated: i64, through: &str) -> MigrationProgress {
    MigrationProgress {
        migrated_objects: migrated,
        remaining_objects: Some(1000 - migrated),
        migrated_through: through.into(),
        ..Default::default()
    }
}

#[test]
fn a_status_update_without_progress_keeps_the_stored_one() {
    let s = MigrationStrategy;
    let mut old = svm("", "configmaps");
    old.status.conditions.push(condition("Running", "True"));
    old.status.progress = Some(checkpoint(500, "demo/cm-00499"));
    // What a client whose types have no `progress` sends back: the rest of the status, and a
    // condition of its own.
    let mut new = old.clone();
    new.status.progress = None;
    new.status.conditions.push(condition("Checked", "True"));
    s.prepare_for_status_update(&mut new, &old);
    assert_eq!(new.status.progress, old.status.progress);
    assert_eq!(new.status.conditions.len(), 2, "the rest is the write's");
    // Nothing stored, nothing sent: still nothing.
    let bare = svm("", "configmaps");
    let mut new = bare.clone();
    s.prepare_for_status_update(&mut new, &bare);
    assert_eq!(new.status.progress, None);
}

#[test]
fn a_status_update_with_progress_replaces_the_stored_one_whole() {
    let s = MigrationStrategy;
    let mut old = svm("", "configmaps");
    let mut stored = checkpoint(500, "demo/cm-00499");
    stored.failed_objects = 1;
    stored.failures.push(crate::migration::ObjectFailure {
        namespace: "demo".into(),
        name: "cm-00007".into(),
        ..Default::default()
    });
    old.status.progress = Some(stored);
    let mut new = old.clone();
    new.status.progress = Some(checkpoint(700, "demo/cm-00699"));
    s.prepare_for_status_update(&mut new, &old);
    // Replaced, not merged: the stored refusals are not carried into the new progress.
    assert_eq!(new.status.progress, Some(checkpoint(700, "demo/cm-00699")));
}

mod progress;

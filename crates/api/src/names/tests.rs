use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use svm_registry::Strategy;

use super::*;
use crate::migration::{MigrationStrategy, StorageVersionMigration};
use crate::storagestate::{StorageState, StorageStateStrategy};

fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn annotated(pairs: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        annotations: map(pairs),
        ..Default::default()
    }
}

fn labelled(pairs: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        labels: map(pairs),
        ..Default::default()
    }
}

/// Every renamed name moved from the reserved domain to ours, keeping its last segment, and
/// none twice: the table is what the readers, the warnings and the docs go by.
#[test]
fn every_renamed_name_keeps_its_segment_in_our_domain() {
    for r in RENAMED.iter().chain(&CONVERSION_RENAMED) {
        let old = r.old.strip_prefix("storagemigration.k8s.io/");
        let new = r.new.strip_prefix(&format!("{DOMAIN}/"));
        assert!(old.is_some() && old == new, "{r:?}");
    }
    let mut olds: Vec<&str> = RENAMED.iter().map(|r| r.old).collect();
    olds.sort_unstable();
    olds.dedup();
    assert_eq!(olds.len(), RENAMED.len());
}

/// Each old spelling is still read, under its own place (a label is not read from the
/// annotations), and the new name wins where both are set.
#[test]
fn each_old_spelling_is_read_and_the_new_name_wins() {
    for r in &RENAMED {
        type Read = for<'a> fn(&'a ObjectMeta, &str) -> Option<&'a str>;
        type Make = fn(&[(&str, &str)]) -> ObjectMeta;
        let (read, other): (Read, Make) = match r.place {
            Place::Label => (label, labelled),
            Place::Annotation => (annotation, annotated),
        };
        assert_eq!(read(&other(&[(r.new, "new")]), r.new), Some("new"), "{r:?}");
        assert_eq!(read(&other(&[(r.old, "old")]), r.new), Some("old"), "{r:?}");
        let both = other(&[(r.old, "old"), (r.new, "new")]);
        assert_eq!(read(&both, r.new), Some("new"), "{r:?}");
        assert_eq!(read(&ObjectMeta::default(), r.new), None, "{r:?}");
        // The wrong place: an annotation is not a label, nor the other way round.
        let misplaced = match r.place {
            Place::Label => annotated(&[(r.old, "old")]),
            Place::Annotation => labelled(&[(r.old, "old")]),
        };
        assert_eq!(read(&misplaced, r.new), None, "{r:?}");
    }
    // A name never renamed has no old spelling to fall back to.
    let meta = annotated(&[("storagemigration.k8s.io/owner", "x")]);
    assert_eq!(annotation(&meta, "storage.svm-apiserver.io/owner"), None);
}

#[test]
fn a_migration_with_the_old_policy_spelling_still_skips_and_is_still_validated() {
    let s = MigrationStrategy;
    let with = |value: &str| StorageVersionMigration {
        metadata: ObjectMeta {
            name: Some("m".into()),
            annotations: map(&[("storagemigration.k8s.io/on-object-failure", value)]),
            ..Default::default()
        },
        spec: crate::migration::MigrationSpec {
            resource: crate::migration::GroupVersionResource {
                group: "apps".into(),
                version: String::new(),
                resource: "deployments".into(),
            },
            continue_token: String::new(),
        },
        ..Default::default()
    };
    assert!(with("Skip").skips_refused_objects());
    assert!(!with("Fail").skips_refused_objects());
    assert!(s.validate(&with("Skip")).is_empty());
    // A typo under the old name is refused as it always was, naming the key it is under.
    let errs = s.validate(&with("skip"));
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        ["metadata.annotations[storagemigration.k8s.io/on-object-failure]"]
    );
    // Both spellings, each wrong: both named.
    let mut both = with("skip");
    both.metadata
        .annotations
        .get_or_insert_default()
        .insert(ON_OBJECT_FAILURE_ANNOTATION.into(), "Never".into());
    assert_eq!(s.validate(&both).len(), 2);
}

#[test]
fn imported_history_under_the_old_spelling_is_still_history() {
    let old = annotated(&[("storagemigration.k8s.io/imported-history", "true")]);
    assert!(is_imported_history(&old));
    assert!(is_imported_history(&annotated(&[(
        IMPORTED_HISTORY_ANNOTATION,
        "true"
    )])));
    assert!(!is_imported_history(&annotated(&[(
        IMPORTED_HISTORY_ANNOTATION,
        "false"
    )])));
    assert!(!is_imported_history(&ObjectMeta::default()));
}

#[test]
fn a_create_with_old_spellings_earns_one_warning_each_naming_the_new_name() {
    let meta = ObjectMeta {
        labels: map(&[
            ("storagemigration.k8s.io/encryption-rotation", "true"),
            ("team", "storage"),
        ]),
        annotations: map(&[
            ("storagemigration.k8s.io/on-object-failure", "Skip"),
            (ON_OBJECT_FAILURE_ANNOTATION, "Skip"),
            ("storagemigration.k8s.io/owner", "not ours"),
        ]),
        ..Default::default()
    };
    assert_eq!(
        old_name_warnings(&meta, None),
        [
            "metadata.annotations[storagemigration.k8s.io/on-object-failure]: deprecated, and no \
             longer read from svm-apiserver 0.3.0; use \"storage.svm-apiserver.io/on-object-failure\" \
             instead",
            "metadata.labels[storagemigration.k8s.io/encryption-rotation]: deprecated, and no \
             longer read from svm-apiserver 0.3.0; use \"storage.svm-apiserver.io/encryption-rotation\" \
             instead",
        ]
    );
    assert!(
        old_name_warnings(&annotated(&[(ON_OBJECT_FAILURE_ANNOTATION, "Skip")]), None).is_empty()
    );
    assert!(old_name_warnings(&ObjectMeta::default(), None).is_empty());
}

/// An update is warned about the old names it adds or changes, not those already stored (an
/// older trigger's annotations, the rotation label the trigger still sets).
#[test]
fn an_update_is_warned_about_what_it_brings_only() {
    let stored = annotated(&[("storagemigration.k8s.io/history-seq", "3")]);
    assert!(old_name_warnings(&stored, Some(&stored)).is_empty());
    let changed = annotated(&[("storagemigration.k8s.io/history-seq", "4")]);
    assert_eq!(old_name_warnings(&changed, Some(&stored)).len(), 1);
    let added = annotated(&[
        ("storagemigration.k8s.io/history-seq", "3"),
        ("storagemigration.k8s.io/on-object-failure", "Skip"),
    ]);
    let warnings = old_name_warnings(&added, Some(&stored));
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with("metadata.annotations[storagemigration.k8s.io/on-object-failure]"),
        "{warnings:?}"
    );
    // The same key as a label on the old object is another name: still new.
    let as_label = labelled(&[("storagemigration.k8s.io/history-seq", "3")]);
    assert_eq!(old_name_warnings(&stored, Some(&as_label)).len(), 1);
}

#[test]
fn both_kinds_that_carry_our_names_warn_through_their_strategies() {
    let m = StorageVersionMigration {
        metadata: annotated(&[("storagemigration.k8s.io/on-object-failure", "Skip")]),
        ..Default::default()
    };
    assert_eq!(MigrationStrategy.warnings_on_create(&m).len(), 1);
    assert!(MigrationStrategy.warnings_on_update(&m, &m).is_empty());
    assert_eq!(
        MigrationStrategy
            .warnings_on_update(&m, &StorageVersionMigration::default())
            .len(),
        1
    );
    let state = StorageState {
        metadata: m.metadata.clone(),
        ..Default::default()
    };
    let strategy = StorageStateStrategy::default();
    assert_eq!(strategy.warnings_on_create(&state).len(), 1);
    assert!(strategy.warnings_on_update(&state, &state).is_empty());
}

#[test]
fn a_copy_moves_the_old_spellings_to_the_new_names() {
    let meta = ObjectMeta {
        labels: map(&[("storagemigration.k8s.io/encryption-rotation", "true")]),
        annotations: map(&[
            ("storagemigration.k8s.io/on-object-failure", "Skip"),
            ("storagemigration.k8s.io/history-seq", "3"),
            (HISTORY_SEQ_ANNOTATION, "4"),
            ("owner", "platform"),
        ]),
        ..Default::default()
    };
    let copy = with_new_names(&meta);
    assert_eq!(
        copy.labels,
        map(&[(ENCRYPTION_ROTATION_LABEL, "true")]),
        "the label moved"
    );
    assert_eq!(
        copy.annotations,
        map(&[
            (ON_OBJECT_FAILURE_ANNOTATION, "Skip"),
            (HISTORY_SEQ_ANNOTATION, "4"),
            ("owner", "platform"),
        ]),
        "the new name's value kept where both were set"
    );
    assert!(old_names(&copy).next().is_none());
}

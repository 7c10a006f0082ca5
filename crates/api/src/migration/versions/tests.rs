use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::VERSIONS;
use crate::migration::ObjectFailure;

/// A time `seconds` after the epoch.
pub(crate) fn time(seconds: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
}

/// A migration with every field of every version set (the conversions' and the protobuf
/// messages' fixture).
pub(crate) fn full() -> StorageVersionMigration {
    StorageVersionMigration {
        metadata: ObjectMeta {
            name: Some("m1".into()),
            labels: Some(BTreeMap::from([("team".into(), "storage".into())])),
            annotations: Some(BTreeMap::from([("note".into(), "x".into())])),
            uid: Some("0b2f6a51-0000-4000-8000-000000000001".into()),
            resource_version: Some("42".into()),
            generation: Some(1),
            creation_timestamp: Some(time(1_700_000_000)),
            ..Default::default()
        },
        spec: MigrationSpec {
            resource: GroupVersionResource {
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
            },
            continue_token: "abc".into(),
        },
        status: MigrationStatus {
            conditions: vec![MigrationCondition {
                type_: "Running".into(),
                status: "True".into(),
                last_transition_time: Some(time(1_700_000_100)),
                reason: "Started".into(),
                message: "migrating".into(),
                observed_generation: Some(1),
            }],
            resource_version: "40".into(),
            progress: Some(MigrationProgress {
                migrated_objects: 10,
                remaining_objects: Some(5),
                continue_token: "next".into(),
                migrated_through: "demo/cm-9".into(),
                last_checkpoint_time: Some(time(1_700_000_200)),
                failed_objects: 12,
                failures: vec![
                    ObjectFailure {
                        namespace: "demo".into(),
                        name: "cm-3".into(),
                        code: 403,
                        reason: "Forbidden".into(),
                        message: "admission webhook \"deny.example.test\" denied the request: no"
                            .into(),
                    },
                    ObjectFailure {
                        name: "cluster-scoped".into(),
                        code: 422,
                        ..Default::default()
                    },
                ],
            }),
        },
    }
}

#[test]
fn v1alpha1_has_the_upstream_shape() {
    let v = encode("v1alpha1", &full()).unwrap();
    assert_eq!(v["apiVersion"], "storagemigration.k8s.io/v1alpha1");
    assert_eq!(v["kind"], "StorageVersionMigration");
    assert_eq!(
        v["spec"],
        json!({"resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "continueToken": "abc"})
    );
    let condition = &v["status"]["conditions"][0];
    assert_eq!(condition["lastUpdateTime"], "2023-11-14T22:15:00Z");
    assert!(condition.get("lastTransitionTime").is_none());
    assert!(condition.get("observedGeneration").is_none());
    // observedGeneration survives in an annotation; no v1-only annotation leaks here.
    let annotations = v["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(
        annotations[ANNOTATION_OBSERVED_GENERATIONS],
        r#"{"Running":1}"#
    );
    assert!(!annotations.contains_key(ANNOTATION_RESOURCE_VERSION));
}

#[test]
fn v1_and_v1beta1_have_the_upstream_shape_field_for_field() {
    let v1 = encode("v1", &full()).unwrap();
    assert_eq!(
        v1["spec"],
        json!({"resource": {"group": "apps", "resource": "deployments"}})
    );
    let annotations = v1["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(annotations[ANNOTATION_RESOURCE_VERSION], "v1");
    assert_eq!(annotations[ANNOTATION_CONTINUE_TOKEN], "abc");
    assert!(!annotations.contains_key(ANNOTATION_OBSERVED_GENERATIONS));

    // Through the upstream types (k8s-openapi) and back, without our status.progress, nothing
    // is lost or added: our shape is upstream's.
    let mut without_progress = v1.clone();
    without_progress["status"]
        .as_object_mut()
        .unwrap()
        .remove("progress");
    let upstream: k8s_openapi::api::storagemigration::v1::StorageVersionMigration =
        serde_json::from_value(without_progress.clone()).unwrap();
    assert_eq!(serde_json::to_value(&upstream).unwrap(), without_progress);

    let mut beta = encode("v1beta1", &full()).unwrap();
    assert_eq!(beta["apiVersion"], "storagemigration.k8s.io/v1beta1");
    beta["status"].as_object_mut().unwrap().remove("progress");
    let upstream: k8s_openapi::api::storagemigration::v1beta1::StorageVersionMigration =
        serde_json::from_value(beta.clone()).unwrap();
    assert_eq!(serde_json::to_value(&upstream).unwrap(), beta);
}

#[test]
fn reserved_annotations_never_reach_the_hub() {
    let mut body = encode("v1", &full()).unwrap();
    body["metadata"]["annotations"][ANNOTATION_OBSERVED_GENERATIONS] = json!("{\"Running\":7}");
    let hub = decode("v1", body).unwrap();
    let annotations = hub.metadata.annotations.unwrap();
    assert_eq!(annotations.len(), 1, "{annotations:?}");
    assert_eq!(annotations["note"], "x");
    // v1's own observedGeneration wins over a stray annotation.
    assert_eq!(hub.status.conditions[0].observed_generation, Some(1));
}

/// A body read from a server before the rename carries the conversion annotations' old
/// spellings: still read (the new one wins), and never stored.
#[test]
fn the_old_spellings_of_the_conversion_annotations_are_still_read() {
    let mut v1 = encode("v1", &full()).unwrap();
    let annotations = v1["metadata"]["annotations"].as_object_mut().unwrap();
    for renamed in &crate::names::CONVERSION_RENAMED {
        if let Some(value) = annotations.remove(renamed.new) {
            annotations.insert(renamed.old.into(), value);
        }
    }
    let hub = decode("v1", v1.clone()).unwrap();
    assert_eq!(
        hub,
        full(),
        "v1alpha1's version and continue token came back"
    );
    v1["metadata"]["annotations"][ANNOTATION_CONTINUE_TOKEN] = json!("new");
    assert_eq!(decode("v1", v1).unwrap().spec.continue_token, "new");

    let mut alpha = encode("v1alpha1", &full()).unwrap();
    let annotations = alpha["metadata"]["annotations"].as_object_mut().unwrap();
    let generations = annotations.remove(ANNOTATION_OBSERVED_GENERATIONS).unwrap();
    annotations.insert(
        "storagemigration.k8s.io/v1-condition-observed-generations".into(),
        generations,
    );
    assert_eq!(decode("v1alpha1", alpha).unwrap(), full());
}

#[test]
fn bodies_that_do_not_fit_are_bad_requests() {
    let err = decode("v1", json!({"spec": {"resource": "deployments"}})).unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(
        err.to_string()
            .starts_with("StorageVersionMigration in version \"v1\" cannot be handled as a StorageVersionMigration:"),
        "{err}"
    );
    assert_eq!(decode("v9", json!({})).unwrap_err().code(), 400);
    assert!(encode("v9", &full()).is_err());
}

fn arb_time() -> impl Strategy<Value = Option<Time>> {
    proptest::option::of((0i64..4_000_000_000).prop_map(time))
}

fn arb_text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ._:-]{0,12}"
}

fn arb_condition(type_: &'static str) -> impl Strategy<Value = MigrationCondition> {
    (
        prop_oneof![Just("True"), Just("False"), Just("Unknown")],
        arb_time(),
        arb_text(),
        arb_text(),
        proptest::option::of(0i64..100),
    )
        .prop_map(
            move |(status, t, reason, message, generation)| MigrationCondition {
                type_: type_.into(),
                status: status.into(),
                last_transition_time: t,
                reason,
                message,
                observed_generation: generation,
            },
        )
}

fn arb_failure() -> impl Strategy<Value = ObjectFailure> {
    (
        "([a-z]{1,6})?",
        "[a-z]{1,6}",
        400i32..500,
        arb_text(),
        arb_text(),
    )
        .prop_map(|(namespace, name, code, reason, message)| ObjectFailure {
            namespace,
            name,
            code,
            reason,
            message,
        })
}

fn arb_hub() -> impl Strategy<Value = StorageVersionMigration> {
    let conditions = (
        proptest::option::of(arb_condition("Running")),
        proptest::option::of(arb_condition("Succeeded")),
        proptest::option::of(arb_condition("Failed")),
    )
        .prop_map(|(a, b, c)| [a, b, c].into_iter().flatten().collect::<Vec<_>>());
    let progress = proptest::option::of(
        (
            0i64..1_000_000,
            proptest::option::of(0i64..1000),
            arb_text(),
            arb_text(),
            arb_time(),
            proptest::collection::vec(arb_failure(), 0..3),
        )
            .prop_map(|(migrated, remaining, token, through, t, failures)| {
                MigrationProgress {
                    migrated_objects: migrated,
                    remaining_objects: remaining,
                    continue_token: token,
                    migrated_through: through,
                    last_checkpoint_time: t,
                    failed_objects: failures.len() as i64,
                    failures,
                }
            }),
    );
    // The hub never holds an empty annotation map (decode drops it, as Go omits empty maps).
    let annotations = proptest::option::of(proptest::collection::btree_map(
        "[a-z]{1,6}",
        arb_text(),
        1..3,
    ));
    (
        "[a-z]{1,10}",
        annotations,
        "([a-z]{1,6}(\\.[a-z]{1,4})?)?",
        "(v[0-9]([a-z]+[0-9])?)?",
        "[a-z]{1,10}",
        arb_text(),
        conditions,
        "[0-9]{0,4}",
        progress,
    )
        .prop_map(
            |(name, annotations, group, version, resource, token, conditions, rv, progress)| {
                StorageVersionMigration {
                    metadata: ObjectMeta {
                        name: Some(name),
                        annotations,
                        ..Default::default()
                    },
                    spec: MigrationSpec {
                        resource: GroupVersionResource {
                            group,
                            version,
                            resource,
                        },
                        continue_token: token,
                    },
                    status: MigrationStatus {
                        conditions,
                        resource_version: rv,
                        progress,
                    },
                }
            },
        )
}

proptest! {
    /// hub -> v -> hub is the identity for every served version.
    #[test]
    fn hub_round_trips_through_every_version(hub in arb_hub()) {
        for v in VERSIONS {
            let served = encode(v, &hub).unwrap();
            // Through the wire form, as a client would see it.
            let wire: Value = serde_json::from_slice(&serde_json::to_vec(&served).unwrap()).unwrap();
            prop_assert_eq!(&decode(v, wire).unwrap(), &hub, "version {}", v);
        }
    }

    /// a -> hub -> b -> hub -> a gives back the original a-object, for every pair.
    #[test]
    fn every_pair_of_versions_round_trips(hub in arb_hub()) {
        for a in VERSIONS {
            let original = encode(a, &hub).unwrap();
            for b in VERSIONS {
                let via_b = encode(b, &decode(a, original.clone()).unwrap()).unwrap();
                let back = encode(a, &decode(b, via_b).unwrap()).unwrap();
                prop_assert_eq!(&back, &original, "{} -> {} -> {}", a, b, a);
            }
        }
    }
}

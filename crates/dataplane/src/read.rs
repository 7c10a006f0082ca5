//! The cluster's objects as the planner sees them: a Node, a data-plane pod, and the
//! DaemonSet's newest revision among its ControllerRevisions — read from the JSON the
//! cluster answers, so that every rule (what "Ready" is, which revision a pod runs) is
//! unit-tested on real shapes.

use serde_json::Value;

use crate::plan::{NodeView, PodView};

/// The annotation a rollout writes on each Node it holds: `namespace/name`.
pub use svm_api::names::DATA_PLANE_ROLLOUT_CLAIM_ANNOTATION as CLAIM_ANNOTATION;

/// The label the DaemonSet controller puts on each pod: the revision it was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// A Node: its Ready condition, its cordon, and our claim on it.
pub fn node_view(node: &Value) -> NodeView {
    NodeView {
        name: text(node, "/metadata/name"),
        uid: text(node, "/metadata/uid"),
        ready: condition_true(node, "Ready"),
        unschedulable: node
            .pointer("/spec/unschedulable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        held_by: node
            .pointer(&format!(
                "/metadata/annotations/{}",
                escape(CLAIM_ANNOTATION)
            ))
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

/// A pod: where it runs, which revision, Ready, being deleted.
pub fn pod_view(pod: &Value) -> PodView {
    PodView {
        uid: text(pod, "/metadata/uid"),
        namespace: text(pod, "/metadata/namespace"),
        name: text(pod, "/metadata/name"),
        node: text(pod, "/spec/nodeName"),
        revision: text(pod, &format!("/metadata/labels/{}", escape(REVISION_LABEL))),
        ready: condition_true(pod, "Ready"),
        deleting: pod.pointer("/metadata/deletionTimestamp").is_some(),
    }
}

/// The hash of the DaemonSet's newest ControllerRevision (the highest `revision`), as its
/// pods' [`REVISION_LABEL`] says it; `None` when it has none yet.
pub fn newest_revision(revisions: &[Value]) -> Option<String> {
    revisions
        .iter()
        .filter_map(|r| Some((r.pointer("/revision")?.as_i64()?, r)))
        .max_by_key(|(number, _)| *number)
        .and_then(|(_, r)| {
            let labels = r.pointer("/metadata/labels")?;
            labels[REVISION_LABEL].as_str().map(str::to_string)
        })
}

/// Whether the DaemonSet's pods change only when deleted (`updateStrategy.type: OnDelete`).
pub fn is_on_delete(daemon_set: &Value) -> bool {
    daemon_set
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        == Some(svm_api::dataplane::ON_DELETE)
}

/// The string at `pointer`, empty when there is none.
pub(crate) fn text(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn condition_true(object: &Value, type_: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// A key as one JSON pointer segment (`/` is `~1`, `~` is `~0`).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_is_ready_cordoned_and_claimed_as_its_object_says() {
        let node = json!({
            "metadata": {"name": "n1", "uid": "n1-uid", "annotations": {CLAIM_ANNOTATION: "storage/engines"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ]},
        });
        assert_eq!(
            node_view(&node),
            NodeView {
                name: "n1".into(),
                uid: "n1-uid".into(),
                ready: true,
                unschedulable: true,
                held_by: Some("storage/engines".into()),
            }
        );
        let bare = node_view(&json!({"metadata": {"name": "n2"}}));
        assert!(!bare.ready && !bare.unschedulable && bare.held_by.is_none());
        let unknown = json!({"metadata": {"name": "n3"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        assert!(!node_view(&unknown).ready);
    }

    #[test]
    fn a_pod_says_its_node_revision_readiness_and_deletion() {
        let pod = json!({
            "metadata": {
                "name": "engine-x", "namespace": "storage", "uid": "u1",
                "labels": {REVISION_LABEL: "7d9f", "app": "engine"},
                "deletionTimestamp": "2026-11-29T00:00:00Z",
            },
            "spec": {"nodeName": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        });
        assert_eq!(
            pod_view(&pod),
            PodView {
                uid: "u1".into(),
                namespace: "storage".into(),
                name: "engine-x".into(),
                node: "n1".into(),
                revision: "7d9f".into(),
                ready: false,
                deleting: true,
            }
        );
    }

    #[test]
    fn the_newest_revision_is_the_highest_numbered_one() {
        let revision = |n: i64, hash: &str| json!({"metadata": {"labels": {REVISION_LABEL: hash}}, "revision": n});
        let revisions = [revision(1, "a"), revision(3, "c"), revision(2, "b")];
        assert_eq!(newest_revision(&revisions).as_deref(), Some("c"));
        assert_eq!(newest_revision(&[]), None);
        assert!(is_on_delete(
            &json!({"spec": {"updateStrategy": {"type": "OnDelete"}}})
        ));
        assert!(!is_on_delete(
            &json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}}})
        ));
        assert!(!is_on_delete(&json!({"spec": {}})));
    }
}

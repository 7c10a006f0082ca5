//! `spec.recreateStatefulSet`: apps/v1 forbids editing a StatefulSet's volumeClaimTemplates,
//! so once every claim is resized the StatefulSet is replaced by one whose templates say the
//! new sizes, the way people do it by hand (`kubectl delete --cascade=orphan`, then create).
//!
//! The steps are passes of the controller, each decided here from what the cluster shows:
//! save the object to create in the migration's status (so a restart between the deletion and
//! the creation loses nothing), delete the old object with orphan cascade and its uid as a
//! precondition (the garbage collector only removes the pods' owner references; pods and
//! claims stay, uids unchanged), wait until it is gone, create the saved one. The new
//! StatefulSet adopts the pods (same selector); their claims are found by name.

use serde_json::{Map, Value};

use super::plan::TemplateTarget;
use svm_api::volumes::{RECREATE_DELETING, RECREATE_DONE, RecreateStatus, quantity_bytes};

/// The StatefulSet as this pass read it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub uid: String,
    /// A deletion is under way (the garbage collector has yet to orphan its pods).
    pub deleting: bool,
    /// The object as served.
    pub object: Value,
}

/// What the replacement needs next.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Next {
    /// Nothing (again): the templates say the sizes, or the replacement exists.
    Done(Option<RecreateStatus>),
    /// Waiting for something outside us; the reason is for the Running condition.
    Wait(&'static str),
    /// Save the object to create; nothing is deleted before the status holds it.
    Save(RecreateStatus),
    /// Delete the old object (orphan cascade, uid precondition).
    Delete { uid: String },
    /// Create the saved object.
    Create { manifest: Value },
}

pub(super) fn next(
    saved: Option<&RecreateStatus>,
    seen: Option<&Seen>,
    templates: &[TemplateTarget],
) -> Next {
    let Some(saved) = saved.filter(|s| s.phase == RECREATE_DELETING) else {
        return first_step(saved, seen, templates);
    };
    match seen {
        None => match &saved.manifest {
            Some(manifest) => Next::Create {
                manifest: manifest.clone(),
            },
            None => Next::Wait("the StatefulSet is gone and no manifest was saved"),
        },
        Some(seen) if seen.uid != saved.stateful_set_uid => Next::Done(Some(RecreateStatus {
            phase: RECREATE_DONE.into(),
            stateful_set_uid: saved.stateful_set_uid.clone(),
            manifest: None,
        })),
        Some(seen) if seen.deleting => {
            Next::Wait("waiting for the garbage collector to orphan the StatefulSet's pods")
        }
        Some(seen) => Next::Delete {
            uid: seen.uid.clone(),
        },
    }
}

fn first_step(
    saved: Option<&RecreateStatus>,
    seen: Option<&Seen>,
    templates: &[TemplateTarget],
) -> Next {
    let Some(seen) = seen else {
        return Next::Wait("the StatefulSet is missing");
    };
    if up_to_date(&seen.object, templates) {
        return Next::Done(saved.cloned());
    }
    if seen.deleting {
        return Next::Wait("the StatefulSet is being deleted by someone else");
    }
    Next::Save(RecreateStatus {
        phase: RECREATE_DELETING.into(),
        stateful_set_uid: seen.uid.clone(),
        manifest: Some(manifest(&seen.object, templates)),
    })
}

/// Every template the migration names asks for its size already.
fn up_to_date(statefulset: &Value, templates: &[TemplateTarget]) -> bool {
    templates.iter().all(|t| {
        own_templates(statefulset)
            .into_iter()
            .flatten()
            .find(|own| own.pointer("/metadata/name").and_then(Value::as_str) == Some(&t.name))
            .and_then(|own| own.pointer("/spec/resources/requests/storage"))
            .and_then(Value::as_str)
            .and_then(quantity_bytes)
            == Some(t.bytes)
    })
}

fn own_templates(statefulset: &Value) -> Option<&Vec<Value>> {
    statefulset
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
}

/// The object to create: the served one without what the server owns (identity, status,
/// managed fields, finalizers of the old object), its templates at the new sizes.
pub(super) fn manifest(statefulset: &Value, templates: &[TemplateTarget]) -> Value {
    let mut object = statefulset.clone();
    if let Some(fields) = object.as_object_mut() {
        fields.remove("status");
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        keep_only(
            meta,
            &[
                "name",
                "namespace",
                "labels",
                "annotations",
                "ownerReferences",
            ],
        );
    }
    let own = object
        .pointer_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut);
    for template in own.into_iter().flatten() {
        let name = template.pointer("/metadata/name").and_then(Value::as_str);
        let Some(target) = templates.iter().find(|t| Some(t.name.as_str()) == name) else {
            continue;
        };
        if let Some(storage) = template.pointer_mut("/spec/resources/requests/storage") {
            *storage = Value::String(target.storage.clone());
        }
    }
    object
}

fn keep_only(fields: &mut Map<String, Value>, keep: &[&str]) {
    fields.retain(|name, _| keep.contains(&name.as_str()));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn target(name: &str, storage: &str) -> TemplateTarget {
        TemplateTarget {
            name: name.into(),
            storage: storage.into(),
            bytes: quantity_bytes(storage).unwrap_or(0),
            template_bytes: None,
            in_target: true,
        }
    }

    fn served(uid: &str, size: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "ns", "uid": uid, "resourceVersion": "7",
                         "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"app": "db"}, "managedFields": [{"manager": "kubectl"}],
                         "finalizers": ["orphan"]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}},
                     "volumeClaimTemplates": [
                         {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": size}}}},
                         {"metadata": {"name": "logs"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}]},
            "status": {"replicas": 3}
        })
    }

    fn seen(uid: &str, size: &str, deleting: bool) -> Seen {
        Seen {
            uid: uid.into(),
            deleting,
            object: served(uid, size),
        }
    }

    #[test]
    fn the_manifest_keeps_the_spec_and_says_the_new_sizes() {
        let made = manifest(&served("u1", "10Gi"), &[target("data", "20Gi")]);
        assert_eq!(
            made["metadata"],
            json!({"name": "db", "namespace": "ns", "labels": {"app": "db"}})
        );
        assert!(made.get("status").is_none());
        assert_eq!(made["spec"]["replicas"], 3);
        let sizes: Vec<&Value> = made["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| &t["spec"]["resources"]["requests"]["storage"])
            .collect();
        assert_eq!(sizes, [&json!("20Gi"), &json!("1Gi")]);
    }

    #[test]
    fn templates_already_at_the_size_need_nothing() {
        let next = next(
            None,
            Some(&seen("u1", "20Gi", false)),
            &[target("data", "20Gi")],
        );
        assert_eq!(next, Next::Done(None));
    }

    #[test]
    fn the_manifest_is_saved_before_anything_is_deleted() {
        let templates = [target("data", "20Gi")];
        let Next::Save(saved) = next(None, Some(&seen("u1", "10Gi", false)), &templates) else {
            panic!("expected a save first");
        };
        assert_eq!(
            (saved.phase.as_str(), saved.stateful_set_uid.as_str()),
            (RECREATE_DELETING, "u1")
        );
        assert_eq!(
            next(Some(&saved), Some(&seen("u1", "10Gi", false)), &templates),
            Next::Delete { uid: "u1".into() }
        );
        assert!(matches!(
            next(Some(&saved), Some(&seen("u1", "10Gi", true)), &templates),
            Next::Wait(_)
        ));
        assert_eq!(
            next(Some(&saved), None, &templates),
            Next::Create {
                manifest: manifest(&served("u1", "10Gi"), &templates)
            }
        );
        let Next::Done(Some(done)) =
            next(Some(&saved), Some(&seen("u2", "20Gi", false)), &templates)
        else {
            panic!("a new uid is the replacement");
        };
        assert_eq!((done.phase.as_str(), done.manifest), (RECREATE_DONE, None));
    }

    #[test]
    fn someone_elses_deletion_is_not_joined() {
        let next = next(
            None,
            Some(&seen("u1", "10Gi", true)),
            &[target("data", "20Gi")],
        );
        assert!(matches!(next, Next::Wait(_)), "{next:?}");
    }
}

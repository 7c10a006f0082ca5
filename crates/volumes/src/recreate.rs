//! `spec.recreateStatefulSet`: apps/v1 forbids editing a StatefulSet's volumeClaimTemplates,
//! so once every claim is resized the StatefulSet is replaced by one whose templates say the
//! new sizes, the way people do it by hand (`kubectl delete --cascade=orphan`, then create).
//!
//! The steps are passes of the controller, each decided here from what the cluster shows:
//! save the object to create in the migration's status, with the uid and resourceVersion of
//! the object it was made from (the migration holds [`RECREATE_FINALIZER`] from before the
//! save until the manifest is dropped, so neither a restart nor the migration's deletion
//! between the deletion and the creation loses it); delete the old object with orphan cascade
//! and that uid and resourceVersion as preconditions (the garbage collector only removes the
//! pods' owner references; pods and claims stay, uids unchanged); wait until it is gone;
//! create the saved one. The new StatefulSet adopts the pods (same selector); their claims
//! are found by name.
//!
//! Only a deletion of ours is followed by a create. Once kube-apiserver accepts it, the status
//! says so (`Orphaned`); a pass that finds the StatefulSet gone with the status still at
//! `Deleting` (a crash between the two writes, or someone else's deletion) reads the pods:
//! an orphan deletion lets the object go only after the garbage collector has taken its owner
//! reference off every pod, so a pod still owned by it — or no pod left of a StatefulSet that
//! had replicas — is a cascading deletion, someone else's (`kubectl delete`, `helm uninstall`).
//! So is a deletion under way without the `orphan` finalizer, and a 404 to our own. Then the
//! manifest is dropped, a Warning Event says so, and nothing is created: an application its
//! owner removed is not brought back.
//!
//! An edit of the StatefulSet after the save (replicas, image) changes its resourceVersion: the
//! next pass saves the manifest again from the edited object, and a deletion already on its way
//! fails its precondition (409) and is decided again, so the re-create never reverts an edit.
//! An edit made while the deletion is under way (kube-apiserver accepts it until the garbage
//! collector lets the object go) is saved again too, when seen.
//!
//! [`RECREATE_FINALIZER`]: svm_api::volumes::RECREATE_FINALIZER

use serde_json::{Map, Value};

use super::template::TemplateTarget;
use svm_api::volumes::{
    RECREATE_DELETING, RECREATE_DONE, RECREATE_ORPHANED, RecreateStatus,
    VolumeClaimMigrationStatus, quantity_bytes,
};

/// The StatefulSet as this pass read it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub uid: String,
    pub resource_version: String,
    /// A deletion is under way (the garbage collector has yet to orphan its pods).
    pub deleting: bool,
    /// That deletion orphans the pods (the `orphan` finalizer: ours, or a user's
    /// `--cascade=orphan`); without it, the pods go with the object.
    pub orphaning: bool,
    /// The object as served.
    pub object: Value,
}

/// How far a re-create may go on this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Every claim is resized and the migration asks for it: start, or go on.
    Go,
    /// Finish what cannot wait — the old StatefulSet is deleted or being deleted, so the saved
    /// one is created — and start nothing else: the migration is paused, refused, blocked, or
    /// resizing a claim again.
    Hold,
    /// Finish what cannot wait, call the rest off (the old StatefulSet was not deleted: the
    /// saved manifest is dropped and it stays as it is): the migration is being deleted, or
    /// no longer asks for a re-create.
    CallOff,
}

/// What the replacement needs next.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Next {
    /// Nothing (again): the templates say the sizes, or the replacement exists.
    Done(Option<RecreateStatus>),
    /// Waiting for something outside us; the reason is for the Running condition.
    Wait(&'static str),
    /// Save the object to create (again, after an edit); nothing is deleted before the status
    /// holds it.
    Save(RecreateStatus),
    /// Delete the old object (orphan cascade, uid and resourceVersion as saved).
    Delete {
        uid: String,
        resource_version: String,
    },
    /// Create the saved object.
    Create { manifest: Value },
    /// The old object was never deleted: drop the saved manifest.
    CallOff,
    /// Someone else deleted the old object, its pods with it: drop the saved manifest and
    /// create nothing.
    Abandon,
}

/// What the pods say about a StatefulSet found gone while its manifest was saved, read only
/// then (`target::observe`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum PodsLeft {
    /// Not read: the StatefulSet is there, or no manifest is saved.
    #[default]
    NotRead,
    /// Every pod there is orphaned, and there is one at least (or the set had no replicas):
    /// what an orphan deletion leaves.
    Orphaned,
    /// A pod still owned by the gone object, or none left of its replicas: a cascading
    /// deletion.
    Cascaded,
}

pub(super) fn next(
    saved: Option<&RecreateStatus>,
    seen: Option<&Seen>,
    pods: PodsLeft,
    templates: &[TemplateTarget],
    mode: Mode,
) -> Next {
    let Some(saved) = saved.filter(|s| in_flight(Some(s))) else {
        if mode != Mode::Go {
            return Next::Done(saved.cloned());
        }
        return first_step(saved, seen, templates);
    };
    match seen {
        None if saved.phase != RECREATE_ORPHANED && pods == PodsLeft::Cascaded => Next::Abandon,
        None => match &saved.manifest {
            Some(manifest) => Next::Create {
                manifest: manifest.clone(),
            },
            None => Next::Wait("the StatefulSet is gone and no manifest was saved"),
        },
        Some(seen) if seen.uid != saved.stateful_set_uid => Next::Done(Some(RecreateStatus {
            phase: RECREATE_DONE.into(),
            stateful_set_uid: saved.stateful_set_uid.clone(),
            stateful_set_resource_version: String::new(),
            manifest: None,
        })),
        Some(seen) if seen.deleting && !seen.orphaning => Next::Abandon,
        Some(seen) if seen.deleting => {
            // Deleted already, orphaning its pods (ours, its acceptance perhaps not recorded
            // yet): whatever the mode, the replacement must come, with the latest spec.
            let latest = manifest(&seen.object, templates);
            if saved.manifest.as_ref() != Some(&latest) || saved.phase != RECREATE_ORPHANED {
                return Next::Save(saving(seen, latest, RECREATE_ORPHANED));
            }
            Next::Wait("waiting for the garbage collector to orphan the StatefulSet's pods")
        }
        Some(_) if mode == Mode::CallOff => Next::CallOff,
        Some(_) if mode == Mode::Hold => {
            Next::Wait("the re-create goes on once every claim is resized again")
        }
        Some(seen) if seen.resource_version != saved.stateful_set_resource_version => Next::Save(
            saving(seen, manifest(&seen.object, templates), RECREATE_DELETING),
        ),
        Some(seen) => Next::Delete {
            uid: seen.uid.clone(),
            resource_version: seen.resource_version.clone(),
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
    Next::Save(saving(
        seen,
        manifest(&seen.object, templates),
        RECREATE_DELETING,
    ))
}

/// The status that saves `manifest`, made from `seen`.
fn saving(seen: &Seen, manifest: Value, phase: &str) -> RecreateStatus {
    RecreateStatus {
        phase: phase.into(),
        stateful_set_uid: seen.uid.clone(),
        stateful_set_resource_version: seen.resource_version.clone(),
        manifest: Some(manifest),
    }
}

/// Whether `status` holds a saved manifest: the migration must hold the finalizer then.
pub(super) fn holds_manifest(status: &VolumeClaimMigrationStatus) -> bool {
    status
        .recreate
        .as_ref()
        .is_some_and(|r| r.manifest.is_some())
}

/// Whether a re-create has begun (a manifest saved, the replacement not there yet).
pub(super) fn in_flight(saved: Option<&RecreateStatus>) -> bool {
    saved.is_some_and(|s| s.phase == RECREATE_DELETING || s.phase == RECREATE_ORPHANED)
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
            resource_version: "7".into(),
            deleting,
            orphaning: deleting,
            object: served(uid, size),
        }
    }

    /// `seen` after someone set its replicas (a new resourceVersion).
    fn edited(mut seen: Seen, replicas: i64, resource_version: &str) -> Seen {
        seen.object["spec"]["replicas"] = json!(replicas);
        seen.object["metadata"]["resourceVersion"] = json!(resource_version);
        seen.resource_version = resource_version.into();
        seen
    }

    fn go(
        saved: Option<&RecreateStatus>,
        seen: Option<&Seen>,
        templates: &[TemplateTarget],
    ) -> Next {
        next(saved, seen, PodsLeft::NotRead, templates, Mode::Go)
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
        let next = go(
            None,
            Some(&seen("u1", "20Gi", false)),
            &[target("data", "20Gi")],
        );
        assert_eq!(next, Next::Done(None));
    }

    #[test]
    fn the_manifest_is_saved_before_anything_is_deleted() {
        let templates = [target("data", "20Gi")];
        let Next::Save(saved) = go(None, Some(&seen("u1", "10Gi", false)), &templates) else {
            panic!("expected a save first");
        };
        assert_eq!(
            (
                saved.phase.as_str(),
                saved.stateful_set_uid.as_str(),
                saved.stateful_set_resource_version.as_str()
            ),
            (RECREATE_DELETING, "u1", "7")
        );
        assert!(holds_manifest(&VolumeClaimMigrationStatus {
            recreate: Some(saved.clone()),
            ..Default::default()
        }));
        assert_eq!(
            go(Some(&saved), Some(&seen("u1", "10Gi", false)), &templates),
            Next::Delete {
                uid: "u1".into(),
                resource_version: "7".into()
            }
        );
        // Its deletion accepted (seen under way, orphaning): recorded, then waited for.
        let Next::Save(orphaned) = go(Some(&saved), Some(&seen("u1", "10Gi", true)), &templates)
        else {
            panic!("an accepted deletion is recorded");
        };
        assert_eq!(orphaned.phase, RECREATE_ORPHANED);
        assert!(in_flight(Some(&orphaned)));
        assert!(matches!(
            go(Some(&orphaned), Some(&seen("u1", "10Gi", true)), &templates),
            Next::Wait(_)
        ));
        assert_eq!(
            go(Some(&saved), None, &templates),
            Next::Create {
                manifest: manifest(&served("u1", "10Gi"), &templates)
            }
        );
        let Next::Done(Some(done)) = go(Some(&saved), Some(&seen("u2", "20Gi", false)), &templates)
        else {
            panic!("a new uid is the replacement");
        };
        assert_eq!(
            (done.phase.as_str(), &done.manifest),
            (RECREATE_DONE, &None)
        );
        assert!(!holds_manifest(&VolumeClaimMigrationStatus {
            recreate: Some(done),
            ..Default::default()
        }));
    }

    /// An edit after the save (replicas 3 → 5): the manifest is saved again from the edited
    /// object, and the deletion is preconditioned on the edited object's resourceVersion; the
    /// replacement says 5.
    #[test]
    fn an_edit_after_the_save_is_saved_again_never_reverted() {
        let templates = [target("data", "20Gi")];
        let Next::Save(first) = go(None, Some(&seen("u1", "10Gi", false)), &templates) else {
            panic!("expected a save first");
        };
        let now = edited(seen("u1", "10Gi", false), 5, "9");
        let Next::Save(again) = go(Some(&first), Some(&now), &templates) else {
            panic!("expected the manifest saved again");
        };
        assert_eq!(again.stateful_set_resource_version, "9");
        assert_eq!(
            again.manifest.as_ref().map(|m| &m["spec"]["replicas"]),
            Some(&json!(5))
        );
        assert_eq!(
            go(Some(&again), Some(&now), &templates),
            Next::Delete {
                uid: "u1".into(),
                resource_version: "9".into()
            }
        );
        // Edited again while the deletion is under way: saved again, still waiting.
        let mut deleting = edited(now, 6, "11");
        deleting.deleting = true;
        deleting.orphaning = true;
        let Next::Save(latest) = go(Some(&again), Some(&deleting), &templates) else {
            panic!("an edit of a deleting StatefulSet is kept too");
        };
        assert_eq!(
            latest.manifest.as_ref().map(|m| &m["spec"]["replicas"]),
            Some(&json!(6))
        );
        assert!(matches!(
            go(Some(&latest), Some(&deleting), &templates),
            Next::Wait(_)
        ));
        let Next::Create { manifest } = go(Some(&latest), None, &templates) else {
            panic!("the latest manifest is created");
        };
        assert_eq!(manifest["spec"]["replicas"], 6);
    }

    /// Paused, refused or resizing again (Hold), or deleted / no longer asking (CallOff): a
    /// StatefulSet already deleted is always created again; one not deleted yet is left alone
    /// (Hold) or the re-create is called off (CallOff). Nothing starts without Go.
    #[test]
    fn a_deleted_statefulset_always_comes_back() {
        let templates = [target("data", "20Gi")];
        let Next::Save(saved) = go(None, Some(&seen("u1", "10Gi", false)), &templates) else {
            panic!("expected a save first");
        };
        for mode in [Mode::Hold, Mode::CallOff] {
            assert!(
                matches!(
                    next(Some(&saved), None, PodsLeft::Orphaned, &templates, mode),
                    Next::Create { .. }
                ),
                "{mode:?}"
            );
            assert!(
                matches!(
                    next(
                        Some(&saved),
                        Some(&seen("u1", "10Gi", true)),
                        PodsLeft::NotRead,
                        &templates,
                        mode
                    ),
                    Next::Save(RecreateStatus { ref phase, .. }) if phase == RECREATE_ORPHANED
                ),
                "{mode:?}"
            );
            assert!(
                matches!(
                    next(
                        None,
                        Some(&seen("u1", "10Gi", false)),
                        PodsLeft::NotRead,
                        &templates,
                        mode
                    ),
                    Next::Done(None)
                ),
                "nothing starts: {mode:?}"
            );
        }
        let standing = seen("u1", "10Gi", false);
        assert!(matches!(
            next(
                Some(&saved),
                Some(&standing),
                PodsLeft::NotRead,
                &templates,
                Mode::Hold
            ),
            Next::Wait(_)
        ));
        assert_eq!(
            next(
                Some(&saved),
                Some(&standing),
                PodsLeft::NotRead,
                &templates,
                Mode::CallOff
            ),
            Next::CallOff
        );
        assert!(in_flight(Some(&saved)));
    }

    /// A `kubectl delete` or `helm uninstall` of the StatefulSet between the save and our
    /// deletion, in every mode: under way without the `orphan` finalizer, or gone with its pods
    /// owned by it still (or none left), it is not created again. Gone with its pods orphaned,
    /// or after our deletion was accepted, it is.
    #[test]
    fn someone_elses_cascading_deletion_is_not_undone() {
        let templates = [target("data", "20Gi")];
        let Next::Save(saved) = go(None, Some(&seen("u1", "10Gi", false)), &templates) else {
            panic!("expected a save first");
        };
        let mut cascading = seen("u1", "10Gi", true);
        cascading.orphaning = false;
        let orphaned = RecreateStatus {
            phase: RECREATE_ORPHANED.into(),
            ..saved.clone()
        };
        for mode in [Mode::Go, Mode::Hold, Mode::CallOff] {
            let at = |saved: &RecreateStatus, seen: Option<&Seen>, pods| {
                next(Some(saved), seen, pods, &templates, mode)
            };
            assert_eq!(
                at(&saved, Some(&cascading), PodsLeft::NotRead),
                Next::Abandon,
                "{mode:?}"
            );
            assert_eq!(
                at(&saved, None, PodsLeft::Cascaded),
                Next::Abandon,
                "{mode:?}"
            );
            assert!(
                matches!(at(&saved, None, PodsLeft::Orphaned), Next::Create { .. }),
                "{mode:?}"
            );
            // Ours was accepted: whatever the pods say now, the replacement comes.
            assert!(
                matches!(at(&orphaned, None, PodsLeft::Cascaded), Next::Create { .. }),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn someone_elses_deletion_is_not_joined() {
        let next = go(
            None,
            Some(&seen("u1", "10Gi", true)),
            &[target("data", "20Gi")],
        );
        assert!(matches!(next, Next::Wait(_)), "{next:?}");
    }
}

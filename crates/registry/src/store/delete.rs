//! Delete (k8s.io/apiserver `rest.BeforeDelete` + `Store.Delete` for kinds without graceful
//! deletion): preconditions, the garbage collector's finalizers a propagation policy asks for
//! (the cluster's garbage collector handles aggregated resources too), then either mark the
//! object as deleting while finalizers hold it or remove it.

use k8s_openapi::Metadata;

use super::super::error::{ApiError, ApiResult};
use super::super::rest::Preconditions;
use super::super::strategy::Strategy;
use super::{Also, Committed, MAX_WRITE_ATTEMPTS, ObjectRef, Store, now};
use svm_storage::{Compare, KeyValue, Op};

/// The outcome of a delete.
#[derive(Debug, Clone)]
pub struct Deletion<O> {
    /// The last state when gone; the object with `deletionTimestamp` set while finalizers
    /// remain.
    pub object: O,
    /// Whether the object is gone from storage (or would be, for a dry run).
    pub gone: bool,
}

/// What a delete attempt does, decided from the object as read.
enum Planned<O> {
    /// Nothing to write: the object is already being deleted as asked.
    Unchanged(Deletion<O>),
    /// The write (a put of the marked object, or the delete), and the outcome it commits.
    Write(Deletion<O>, Op),
}

impl<S: Strategy> Store<S> {
    /// Delete the object at `at` (the controllers' entry point: same rules as a REST delete).
    pub async fn delete<'a>(
        &self,
        at: impl Into<ObjectRef<'a>>,
        preconditions: &Preconditions,
    ) -> ApiResult<Deletion<S::Object>> {
        self.delete_object(at.into(), preconditions, None, false, Also::default())
            .await
    }

    /// A delete with a `propagationPolicy` (`Orphan`, `Background`, `Foreground`).
    pub(crate) async fn delete_object(
        &self,
        at: ObjectRef<'_>,
        preconditions: &Preconditions,
        propagation_policy: Option<&str>,
        dry_run: bool,
        also: Also<'_>,
    ) -> ApiResult<Deletion<S::Object>> {
        let name = at.name;
        let key = self.key(at)?;
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let (kv, current) = self.read_current(&key, name).await?;
            self.check_preconditions(&current, preconditions, name)?;
            let (mut deletion, op) =
                match self.plan_deletion(&key, &kv, current, propagation_policy)? {
                    Planned::Unchanged(deletion) => return Ok(deletion),
                    Planned::Write(deletion, op) => (deletion, op),
                };
            if dry_run {
                return Ok(deletion);
            }
            let compare = Compare::ModRevision(key.clone(), kv.mod_revision);
            match self.commit(name, compare, vec![op], also).await? {
                Committed::At(revision) => {
                    if !deletion.gone {
                        deletion.object.metadata_mut().resource_version =
                            Some(revision.to_string());
                    }
                    return Ok(deletion);
                }
                Committed::ObjectChanged { current: None } => return Err(self.not_found(name)),
                Committed::ObjectChanged { .. } => continue,
            }
        }
        Err(self.stale(name))
    }

    /// What deleting `current` (read as `kv`) writes: the object with the finalizers the
    /// policy asks for and marked as deleting while finalizers hold it, or its removal.
    fn plan_deletion(
        &self,
        key: &str,
        kv: &KeyValue,
        current: S::Object,
        propagation_policy: Option<&str>,
    ) -> ApiResult<Planned<S::Object>> {
        let mut deleting = current.clone();
        let finalizers = current.metadata().finalizers.as_deref().unwrap_or_default();
        if let Some(changed) = gc_finalizers(finalizers, propagation_policy) {
            deleting.metadata_mut().finalizers = Some(changed).filter(|f| !f.is_empty());
        }
        let held = deleting
            .metadata()
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty());
        if !held {
            let gone = Deletion {
                object: current,
                gone: true,
            };
            return Ok(Planned::Write(gone, Op::Delete(key.to_string())));
        }
        mark_as_deleting(deleting.metadata_mut());
        let bytes = self.encode_for_storage(&deleting)?;
        if bytes == kv.value {
            // Already being deleted: nothing to write.
            return Ok(Planned::Unchanged(Deletion {
                object: current,
                gone: false,
            }));
        }
        let marked = Deletion {
            object: deleting,
            gone: false,
        };
        Ok(Planned::Write(marked, Op::Put(key.to_string(), bytes)))
    }

    /// metav1.Preconditions; a mismatch is a 409 naming the Kind (upstream's
    /// `rest.BeforeDelete` texts).
    fn check_preconditions(
        &self,
        current: &S::Object,
        preconditions: &Preconditions,
        name: &str,
    ) -> ApiResult<()> {
        let meta = current.metadata();
        let conflict = |message: String| ApiError::Conflict {
            group: self.group().into(),
            resource: self.kind().into(),
            name: name.into(),
            message,
        };
        if let Some(uid) = &preconditions.uid {
            let actual = meta.uid.clone().unwrap_or_default();
            if *uid != actual {
                return Err(conflict(format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
                )));
            }
        }
        if let Some(rv) = &preconditions.resource_version {
            let actual = meta.resource_version.clone().unwrap_or_default();
            if *rv != actual {
                return Err(conflict(format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
                )));
            }
        }
        Ok(())
    }
}

const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// The finalizers a propagation policy asks the garbage collector for (upstream's
/// `deletionFinalizersForGarbageCollection`); `None` when they do not change. Without a
/// policy, the object's own GC finalizers decide, so nothing changes.
fn gc_finalizers(finalizers: &[String], policy: Option<&str>) -> Option<Vec<String>> {
    let (orphan, foreground) = match policy? {
        "Orphan" => (true, false),
        "Foreground" => (false, true),
        "Background" => (false, false),
        _ => return None,
    };
    let mut changed: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND)
        .cloned()
        .collect();
    if orphan {
        changed.push(FINALIZER_ORPHAN.into());
    }
    if foreground {
        changed.push(FINALIZER_FOREGROUND.into());
    }
    let as_set = |list: &[String]| {
        list.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
    };
    (as_set(&changed) != as_set(finalizers)).then_some(changed)
}

/// Upstream's `markAsDeleting`: the first delete of an object held by finalizers bumps its
/// generation and sets `deletionTimestamp`; the grace period is zero (no graceful deletion).
fn mark_as_deleting(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    if meta.deletion_timestamp.is_none() {
        if let Some(generation) = meta.generation.filter(|g| *g > 0) {
            meta.generation = Some(generation + 1);
        }
        meta.deletion_timestamp = Some(now());
    }
    meta.deletion_grace_period_seconds = Some(0);
}

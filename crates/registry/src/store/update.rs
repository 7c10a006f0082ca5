//! Updates: upstream's `GuaranteedUpdate` loop. Read the current object, compute the new one
//! (the request body, or the patch applied to what is stored), check the resourceVersion
//! precondition, let the strategy prepare and validate, and compare-and-swap on the mod
//! revision read. A lost race re-reads and tries again; an update that changes nothing writes
//! nothing; removing the last finalizer of an object being deleted deletes it.

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::super::error::{ApiError, ApiResult, FieldError};
use super::super::metadata;
use super::super::rest::Subresource;
use super::super::strategy::Strategy;
use super::create::merge_causes;
use super::managed::{DEFAULT_FIELD_MANAGER, Tracking};
use super::{
    Also, Committed, MAX_WRITE_ATTEMPTS, ObjectRef, Store, Updated, parse_resource_version,
};
use svm_storage::{Compare, KeyValue, Op};

impl<S: Strategy> Store<S> {
    /// Replace an object (the controllers' entry point: same rules as a REST update),
    /// recorded for the controllers' field manager (`svm-apiserver`) (see [`Store::managed_by`]). The object's
    /// resourceVersion is the precondition; its uid, when set, must match.
    pub async fn update(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.managed_by(DEFAULT_FIELD_MANAGER).update(obj).await
    }

    /// Replace an object's status (`/status`): spec and most metadata stay as stored.
    pub async fn update_status(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.managed_by(DEFAULT_FIELD_MANAGER)
            .update_status(obj)
            .await
    }

    /// A PUT: the body replaces the stored object, its uid a precondition (upstream's
    /// `DefaultUpdatedObjectInfo`; a mismatch is the storage layer's invalid-object error).
    pub(crate) async fn replace(
        &self,
        obj: S::Object,
        subresource: Subresource,
        dry_run: bool,
        tracking: Tracking<'_>,
    ) -> ApiResult<Updated<S::Object>> {
        self.replace_with(obj, subresource, dry_run, tracking, Also::default())
            .await
    }

    /// [`replace`](Self::replace), with what `also` carries in the same transaction. The
    /// object's resourceVersion is the precondition for all of it: when it is stale, nothing
    /// is written and the answer is 409, so the caller recomputes the records from what it
    /// reads next. When the object does not change, the records are still written, guarded by
    /// the object's revision.
    pub(crate) async fn replace_with(
        &self,
        obj: S::Object,
        subresource: Subresource,
        dry_run: bool,
        tracking: Tracking<'_>,
        also: Also<'_>,
    ) -> ApiResult<Updated<S::Object>> {
        let name = obj.metadata().name.clone().unwrap_or_default();
        let namespace = obj.metadata().namespace.clone();
        let at = ObjectRef {
            namespace: namespace.as_deref(),
            name: &name,
        };
        let key = self.key(at)?;
        let uid = obj.metadata().uid.clone().filter(|u| !u.is_empty());
        self.guaranteed_update_with(at, subresource, dry_run, also, tracking, |current| {
                if let Some(uid) = &uid {
                    let current_uid = current.metadata().uid.clone().unwrap_or_default();
                    if *uid != current_uid {
                        return Err(self.conflict(
                            &name,
                            format!(
                                "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"
                            ),
                        ));
                    }
                }
                Ok(obj.clone())
            })
            .await
    }

    /// The update loop. `updated` computes the new object from the current one; it runs once
    /// per attempt, and the change is recorded in managedFields per `tracking`. What `also`
    /// carries (the controllers' fence, extra records) goes in the same transaction as the
    /// object. Returns the object as stored (or
    /// as it would be, for a dry run); for an update that deleted the object (last finalizer
    /// removed), the object as the request made it. With it, the strategy's warnings about the
    /// attempt that counted (`warnings_on_update`, after validation, as upstream's
    /// `BeforeUpdate`).
    pub(crate) async fn guaranteed_update_with<F>(
        &self,
        at: ObjectRef<'_>,
        subresource: Subresource,
        dry_run: bool,
        also: Also<'_>,
        tracking: Tracking<'_>,
        mut updated: F,
    ) -> ApiResult<Updated<S::Object>>
    where
        F: FnMut(&S::Object) -> ApiResult<S::Object> + Send,
    {
        let name = at.name;
        let key = self.key(at)?;
        let target = Target {
            key: &key,
            name,
            dry_run,
            also,
        };
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let (kv, current) = self.read_current(&key, name).await?;
            let mut new = updated(&current)?;
            self.track_update(tracking, subresource, &current, &mut new)?;
            self.check_resource_version(&new, kv.mod_revision, name)?;
            self.before_update(&mut new, &current, subresource)?;
            let warnings = match subresource {
                Subresource::Main => self.strategy.warnings_on_update(&new, &current),
                Subresource::Status => Vec::new(),
            };

            let done = if should_delete_during_update(new.metadata(), current.metadata()) {
                self.delete_by_update(target, kv.mod_revision, new).await?
            } else {
                self.write_update(target, &kv, current, new).await?
            };
            if let Some(object) = done {
                return Ok(Updated { object, warnings });
            }
        }
        Err(self.stale(name))
    }

    /// An update that removed the last finalizer of an object being deleted deletes it (read
    /// at `revision`): the object as the request made it once it is gone, `None` when it
    /// changed meanwhile (try again).
    async fn delete_by_update(
        &self,
        target: Target<'_>,
        revision: svm_storage::Revision,
        new: S::Object,
    ) -> ApiResult<Option<S::Object>> {
        if target.dry_run {
            return Ok(Some(new));
        }
        let compare = Compare::ModRevision(target.key.to_string(), revision);
        let ops = vec![Op::Delete(target.key.to_string())];
        match self.commit(target.name, compare, ops, target.also).await? {
            // Another request may have finished the delete: the same outcome.
            Committed::At(_) | Committed::ObjectChanged { current: None } => Ok(Some(new)),
            Committed::ObjectChanged { .. } => Ok(None),
        }
    }

    /// Write `new` over `current` (stored as `kv`): the object as stored, or `None` when it
    /// changed meanwhile (try again). An object that does not change is not written, but the
    /// records `also` carries still are, guarded by its revision.
    async fn write_update(
        &self,
        target: Target<'_>,
        kv: &KeyValue,
        current: S::Object,
        mut new: S::Object,
    ) -> ApiResult<Option<S::Object>> {
        let bytes = self.encode_for_storage(&new)?;
        let unchanged = bytes == kv.value;
        if unchanged && target.also.records.is_empty() {
            // Nothing changes: no write, the same resourceVersion (recording 08).
            return Ok(Some(current));
        }
        if target.dry_run {
            return Ok(Some(if unchanged { current } else { new }));
        }
        let ops = if unchanged {
            Vec::new()
        } else {
            vec![Op::Put(target.key.to_string(), bytes)]
        };
        let compare = Compare::ModRevision(target.key.to_string(), kv.mod_revision);
        match self.commit(target.name, compare, ops, target.also).await? {
            Committed::At(_) if unchanged => Ok(Some(current)),
            Committed::At(revision) => {
                new.metadata_mut().resource_version = Some(revision.to_string());
                Ok(Some(new))
            }
            Committed::ObjectChanged { .. } => Ok(None),
        }
    }

    /// The request's resourceVersion must be the stored one (upstream answers 422 when it is
    /// missing, naming the resource, and 409 when it differs).
    fn check_resource_version(
        &self,
        new: &S::Object,
        stored: svm_storage::Revision,
        name: &str,
    ) -> ApiResult<()> {
        match new.metadata().resource_version.as_deref() {
            None | Some("") | Some("0") => Err(ApiError::Invalid {
                group: self.group().into(),
                kind: self.plural().into(),
                name: name.into(),
                causes: vec![FieldError {
                    reason: "FieldValueInvalid",
                    field: "metadata.resourceVersion".into(),
                    message: "Invalid value: 0: must be specified for an update".into(),
                }],
            }),
            Some(rv) if parse_resource_version(rv)? != stored => Err(self.stale(name)),
            Some(_) => Ok(()),
        }
    }

    /// Upstream's `rest.BeforeUpdate`: keep what an update may not change, let the strategy
    /// prepare, bump the generation on spec changes, validate.
    fn before_update(
        &self,
        new: &mut S::Object,
        old: &S::Object,
        subresource: Subresource,
    ) -> ApiResult<()> {
        let old_meta = old.metadata();
        {
            let meta = new.metadata_mut();
            // The key names the namespace: an update never moves an object.
            meta.namespace = old_meta.namespace.clone();
            meta.generation = old_meta.generation;
            meta.self_link = None;
        }
        match subresource {
            Subresource::Main => self.prepare_main_update(new, old)?,
            Subresource::Status => {
                self.strategy.prepare_for_status_update(new, old);
                // `/status` changes status only.
                keep_from_old(new, old, |field| field != "status")?;
                reset_meta_for_status(new.metadata_mut(), old_meta);
            }
        }
        keep_system_meta(new.metadata_mut(), old_meta);
        self.validate_updated(new, old, subresource)
    }

    /// The strategy prepares an update of the main resource, which never changes status (when
    /// the kind has a status subresource); a spec change bumps the generation.
    fn prepare_main_update(&self, new: &mut S::Object, old: &S::Object) -> ApiResult<()> {
        self.strategy.prepare_for_update(new, old);
        if self.strategy.info().has_status_subresource {
            keep_from_old(new, old, |field| field == "status")?;
        }
        let old_generation = old.metadata().generation;
        new.metadata_mut().generation = if self.strategy.spec_changed(new, old) {
            Some(old_generation.unwrap_or(0) + 1)
        } else {
            old_generation
        };
        Ok(())
    }

    /// The metadata and the kind's own rules on update: 422 Invalid with every cause.
    fn validate_updated(
        &self,
        new: &S::Object,
        old: &S::Object,
        subresource: Subresource,
    ) -> ApiResult<()> {
        let kind_causes = match subresource {
            Subresource::Main => self.strategy.validate_update(new, old),
            Subresource::Status => self.strategy.validate_status_update(new, old),
        };
        let causes = merge_causes(
            metadata::validate_update(new.metadata(), old.metadata(), self.namespaced()),
            kind_causes,
        );
        if causes.is_empty() {
            Ok(())
        } else {
            let name = new.metadata().name.clone().unwrap_or_default();
            Err(self.invalid(&name, causes))
        }
    }
}

/// The metadata only the system sets, kept from the stored object: its uid (unless the
/// update names one), creation and deletion.
fn keep_system_meta(meta: &mut ObjectMeta, old: &ObjectMeta) {
    if meta.uid.as_deref().is_none_or(str::is_empty) {
        meta.uid = old.uid.clone();
    }
    if old.creation_timestamp.is_some() {
        meta.creation_timestamp = old.creation_timestamp.clone();
    }
    if old.deletion_timestamp.is_some() {
        meta.deletion_timestamp = old.deletion_timestamp.clone();
    }
    if old.deletion_grace_period_seconds.is_some() && meta.deletion_grace_period_seconds.is_none() {
        meta.deletion_grace_period_seconds = old.deletion_grace_period_seconds;
    }
}

/// Where an update loop writes, and how: the object's key and name, whether the write is a
/// dry run, and what else its transaction carries.
#[derive(Clone, Copy)]
struct Target<'a> {
    key: &'a str,
    name: &'a str,
    dry_run: bool,
    also: Also<'a>,
}

/// Upstream's `ResetObjectMetaForStatus`: a status update keeps the stored metadata that only
/// the main resource may change.
fn reset_meta_for_status(meta: &mut ObjectMeta, old: &ObjectMeta) {
    meta.deletion_timestamp = old.deletion_timestamp.clone();
    meta.generation = old.generation;
    meta.labels = old.labels.clone();
    meta.annotations = old.annotations.clone();
    meta.finalizers = old.finalizers.clone();
    meta.owner_references = old.owner_references.clone();
}

/// Copy the top-level fields `from_old` selects (never metadata or type meta) from the stored
/// object into the new one, through their JSON forms.
fn keep_from_old<O>(new: &mut O, old: &O, from_old: impl Fn(&str) -> bool) -> ApiResult<()>
where
    O: serde::Serialize + serde::de::DeserializeOwned,
{
    let internal = |e: serde_json::Error| ApiError::Internal(format!("object round trip: {e}"));
    let (Value::Object(mut new_map), Value::Object(old_map)) = (
        serde_json::to_value(&*new).map_err(internal)?,
        serde_json::to_value(old).map_err(internal)?,
    ) else {
        return Ok(());
    };
    let selected =
        |field: &str| !matches!(field, "metadata" | "apiVersion" | "kind") && from_old(field);
    let mut changed = false;
    let new_fields: Vec<String> = new_map.keys().filter(|k| selected(k)).cloned().collect();
    for field in new_fields {
        if !old_map.contains_key(&field) {
            new_map.shift_remove(&field);
            changed = true;
        }
    }
    for (field, value) in old_map.iter().filter(|(k, _)| selected(k)) {
        if new_map.get(field) != Some(value) {
            new_map.insert(field.clone(), value.clone());
            changed = true;
        }
    }
    if changed {
        *new = serde_json::from_value(Value::Object(new_map)).map_err(internal)?;
    }
    Ok(())
}

/// Upstream's `ShouldDeleteDuringUpdate`: the last finalizer of an object being deleted (with
/// no grace period left) was removed.
fn should_delete_during_update(new: &ObjectMeta, old: &ObjectMeta) -> bool {
    new.finalizers.as_ref().is_none_or(Vec::is_empty)
        && old.deletion_timestamp.is_some()
        && old.deletion_grace_period_seconds.unwrap_or(0) == 0
}

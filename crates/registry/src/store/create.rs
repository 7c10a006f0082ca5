//! Create: system metadata, name generation, strategy preparation and validation, then an
//! insert-if-absent transaction (k8s.io/apiserver `rest.BeforeCreate` + `Store.Create`).

use k8s_openapi::Metadata;

use super::super::error::{ApiError, ApiResult, FieldError};
use super::super::metadata;
use super::super::rest::Subresource;
use super::super::strategy::Strategy;
use super::managed::{DEFAULT_FIELD_MANAGER, Tracking};
use super::{Also, Committed, ObjectRef, Store, now};
use svm_storage::{Compare, Op, StorageError};

/// How many fresh names a `generateName` create tries before giving up on collisions.
const GENERATE_NAME_ATTEMPTS: usize = 8;

impl<S: Strategy> Store<S> {
    /// Create `obj` (the controllers' entry point: same rules as a REST create), recorded
    /// for the controllers' field manager (`svm-apiserver`); see [`Store::managed_by`] to name the manager.
    pub async fn create(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.managed_by(DEFAULT_FIELD_MANAGER).create(obj).await
    }

    /// Create; with `dry_run` everything but the write happens and the answer carries no
    /// resourceVersion. The write is recorded in managedFields per `tracking`, against the
    /// kind's empty object.
    pub(crate) async fn create_object(
        &self,
        mut obj: S::Object,
        dry_run: bool,
        also: Also<'_>,
        tracking: Tracking<'_>,
    ) -> ApiResult<S::Object> {
        self.track_update(tracking, Subresource::Main, &S::Object::default(), &mut obj)?;
        let resource_version_given = obj
            .metadata()
            .resource_version
            .as_deref()
            .is_some_and(|rv| !rv.is_empty());
        let generated = self.prepare_for_create(&mut obj);
        let name = obj.metadata().name.clone().unwrap_or_default();
        let causes = merge_causes(
            metadata::validate_create(obj.metadata(), self.namespaced()),
            self.strategy.validate(&obj),
        );
        if !causes.is_empty() {
            return Err(self.invalid(&name, causes));
        }
        if resource_version_given {
            // The storage layer's refusal upstream, surfaced as an internal error there too.
            return Err(ApiError::Internal(
                "resourceVersion should not be set on objects to be created".into(),
            ));
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.insert(&mut obj, dry_run, also).await {
                Err(ApiError::AlreadyExists { .. })
                    if generated && attempts < GENERATE_NAME_ATTEMPTS =>
                {
                    let base = obj.metadata().generate_name.clone().unwrap_or_default();
                    obj.metadata_mut().name = Some((self.name_generator)(&base));
                }
                Err(err) => return Err(err),
                Ok(()) => return Ok(obj),
            }
        }
    }

    /// Wipe and fill system metadata, generate a name, let the strategy prepare. Returns
    /// whether the name was generated.
    fn prepare_for_create(&self, obj: &mut S::Object) -> bool {
        let meta = obj.metadata_mut();
        meta.resource_version = None;
        // Cluster-scoped: a namespace in the body is dropped, as upstream does.
        if !self.strategy.info().namespaced {
            meta.namespace = None;
        }
        meta.uid = Some(uuid::Uuid::new_v4().to_string());
        meta.creation_timestamp = Some(now());
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;
        meta.generation = Some(1);
        meta.self_link = None;
        let generated = meta.name.as_deref().is_none_or(str::is_empty)
            && meta.generate_name.as_deref().is_some_and(|g| !g.is_empty());
        if generated {
            let base = meta.generate_name.clone().unwrap_or_default();
            meta.name = Some((self.name_generator)(&base));
        }
        self.strategy.prepare_for_create(obj);
        generated
    }

    /// Write `obj` under its key if absent (with what `also` carries in the same
    /// transaction), setting its resourceVersion.
    async fn insert(&self, obj: &mut S::Object, dry_run: bool, also: Also<'_>) -> ApiResult<()> {
        let key = self.key(ObjectRef::of(obj.metadata()))?;
        let name = obj.metadata().name.clone().unwrap_or_default();
        let name = name.as_str();
        if dry_run {
            // A dry run still answers 409 for a taken name (recording 17a).
            return match self.storage.get(&key).await {
                Ok(Some(_)) => Err(self.storage_error(StorageError::AlreadyExists { key }, name)),
                Ok(None) => Ok(()),
                Err(err) => Err(self.storage_error(err, name)),
            };
        }
        let bytes = self.encode_for_storage(obj)?;
        let ops = vec![Op::Put(key.clone(), bytes)];
        match self
            .commit(name, Compare::Absent(key.clone()), ops, also)
            .await?
        {
            Committed::At(revision) => {
                obj.metadata_mut().resource_version = Some(revision.to_string());
                Ok(())
            }
            Committed::ObjectChanged { .. } => {
                Err(self.storage_error(StorageError::AlreadyExists { key }, name))
            }
        }
    }
}

/// The generic causes, then the kind's that say something new.
pub(super) fn merge_causes(generic: Vec<FieldError>, kind: Vec<FieldError>) -> Vec<FieldError> {
    let mut causes = generic;
    for cause in kind {
        if !causes.contains(&cause) {
            causes.push(cause);
        }
    }
    causes
}

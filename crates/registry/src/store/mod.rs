//! `Store<S>`: the generic store (k8s.io/apiserver `registry/generic/registry.Store` over
//! `storage/etcd3`), driven by a kind's [`Strategy`].
//!
//! - Stored value: the internal form as JSON with `metadata.resourceVersion` cleared, under
//!   `<prefix><name>`. Every read sets `resourceVersion` to the key's mod revision (a list's to
//!   the revision it was read at).
//! - Typed methods for controllers (`get`, `list_all`, `create`, `update`, `update_status`,
//!   `delete`, `watch`) and the JSON [`RestStorage`](super::RestStorage) surface share one code
//!   path each: validation, resourceVersion semantics and watch events are the same.
//! - Writes are compare-and-swap transactions on the mod revision read; a lost race is retried
//!   a bounded number of times, and no lock is held across a storage call.
//!
//! Namespaced kinds (`ResourceInfo::namespaced`) keep their objects under
//! `<prefix><namespace>/<name>` (upstream's `NamespaceKeyFunc`), cluster-scoped ones under
//! `<prefix><name>`; a list in one namespace reads only `<prefix><namespace>/`.

mod create;
mod delete;
mod guarded;
mod list_watch;
mod managed;
mod read;
mod rest;
mod selection;
mod update;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

use super::error::{ApiError, ApiResult};
use super::fence::{Fence, Record};
use super::field_validation::Schemas;
use super::managed_fields::FieldManager;
use super::patch::MergeRules;
use super::strategy::Strategy;
use svm_storage::{Compare, KeyValue, Op, Revision, Storage, StorageError, Txn, TxnOutcome};

pub(crate) use delete::Deletion;
pub use guarded::Guarded;
pub use list_watch::Update;
pub(crate) use watch::{StoreEvent, StoreEventStream};

/// What an update did: the object as stored (or as it would be, for a dry run), and the
/// strategy's warnings about the write (for the REST answer; the controllers drop them).
#[derive(Debug)]
pub(crate) struct Updated<O> {
    pub(crate) object: O,
    pub(crate) warnings: Vec<String>,
}

pub(crate) use crate::clock::now;
pub(crate) use crate::object_ref::ObjectRef;

/// How often a write retries after losing a compare-and-swap race before answering 409.
const MAX_WRITE_ATTEMPTS: usize = 16;

/// What a write commits besides the object, in the same transaction: the controllers' fence
/// (its compare and stamp) and extra records (the trigger's hash history).
#[derive(Clone, Copy, Default)]
pub(crate) struct Also<'a> {
    pub fence: Option<&'a Fence>,
    pub records: &'a [Record],
}

/// How committing an object's write ended, when the fence held.
enum Committed {
    At(Revision),
    /// The object's own compare failed (changed, created or deleted meanwhile): nothing was
    /// written; `current` is its mod revision now, if it exists.
    ObjectChanged {
        current: Option<Revision>,
    },
}

/// The generic store of one kind: typed operations for the controllers and the
/// [`RestStorage`](super::RestStorage) surface for the server, over one [`Storage`].
pub struct Store<S: Strategy> {
    pub(crate) strategy: Arc<S>,
    pub(crate) storage: Arc<dyn Storage>,
    /// Key prefix of this resource, e.g. `/svm-apiserver/storageversionmigrations/`.
    pub(crate) prefix: String,
    /// What the kind's OpenAPI definitions say, per served version, built on first use.
    schemas: OnceLock<KindSchemas>,
    /// `generateName` + suffix (random; replaceable in tests to force collisions).
    name_generator: fn(&str) -> String,
}

impl<S: Strategy> Store<S> {
    /// A store of the kind `strategy` describes, keeping its objects under
    /// `<root_prefix>/<plural>/`.
    pub fn new(strategy: S, storage: Arc<dyn Storage>, root_prefix: &str) -> Self {
        let prefix = format!(
            "{}/{}/",
            root_prefix.trim_end_matches('/'),
            strategy.info().plural
        );
        Self {
            strategy: Arc::new(strategy),
            storage,
            prefix,
            schemas: OnceLock::new(),
            name_generator: super::metadata::generate_name,
        }
    }

    #[cfg(test)]
    pub(crate) fn with_name_generator(mut self, generator: fn(&str) -> String) -> Self {
        self.name_generator = generator;
        self
    }

    /// The kind's strategy.
    pub fn strategy(&self) -> &S {
        &self.strategy
    }

    fn group(&self) -> &'static str {
        self.strategy.info().group
    }

    fn plural(&self) -> &'static str {
        self.strategy.info().plural
    }

    fn kind(&self) -> &'static str {
        self.strategy.info().kind
    }

    fn namespaced(&self) -> bool {
        self.strategy.info().namespaced
    }

    /// The storage key of `at`. Names (and namespaces) that are not a single path segment
    /// are 400s, as upstream's key functions answer; a namespaced kind needs a namespace.
    fn key(&self, at: ObjectRef<'_>) -> ApiResult<String> {
        path_segment("Name", at.name)?;
        if !self.namespaced() {
            return Ok(format!("{}{}", self.prefix, at.name));
        }
        let namespace = at.namespace.unwrap_or_default();
        path_segment("Namespace", namespace)?;
        Ok(format!("{}{namespace}/{}", self.prefix, at.name))
    }

    /// The key prefix of one namespace's objects, or of all of them.
    fn scope_prefix(&self, namespace: Option<&str>) -> String {
        match namespace.filter(|ns| self.namespaced() && !ns.is_empty()) {
            Some(ns) => format!("{}{ns}/", self.prefix),
            None => self.prefix.clone(),
        }
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::NotFound {
            group: self.group().into(),
            resource: self.plural().into(),
            name: name.into(),
        }
    }

    fn conflict(&self, name: &str, message: impl Into<String>) -> ApiError {
        ApiError::Conflict {
            group: self.group().into(),
            resource: self.plural().into(),
            name: name.into(),
            message: message.into(),
        }
    }

    /// A stale resourceVersion (upstream's OptimisticLockErrorMsg).
    fn stale(&self, name: &str) -> ApiError {
        self.conflict(
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    fn invalid(&self, name: &str, causes: Vec<super::FieldError>) -> ApiError {
        ApiError::Invalid {
            group: self.group().into(),
            kind: self.kind().into(),
            name: name.into(),
            causes,
        }
    }

    fn storage_error(&self, err: StorageError, name: &str) -> ApiError {
        ApiError::from_storage(err, self.group(), self.plural(), name)
    }

    /// The stored key-value of `name` and its decoded object (resourceVersion set), or NotFound:
    /// the read at the start of every read-modify-write loop.
    async fn read_current(&self, key: &str, name: &str) -> ApiResult<(KeyValue, S::Object)> {
        let kv = self
            .storage
            .get(key)
            .await
            .map_err(|e| self.storage_error(e, name))?
            .ok_or_else(|| self.not_found(name))?;
        let current = decode_stored(&kv, kv.mod_revision)?;
        Ok((kv, current))
    }

    /// One transaction: the object's compare and ops, plus what `also` carries. A failed
    /// fence is an error (and stops the controllers); a failed object compare is
    /// [`Committed::ObjectChanged`], for the caller's retry loop.
    async fn commit(
        &self,
        name: &str,
        compare: Compare,
        ops: Vec<Op>,
        also: Also<'_>,
    ) -> ApiResult<Committed> {
        let mut txn = Txn {
            compares: vec![compare],
            ops,
        };
        txn.ops.extend(
            also.records
                .iter()
                .map(|r| Op::Put(r.key.clone(), r.value.clone())),
        );
        let answer = match also.fence {
            Some(fence) => {
                let what = format!("writing {} {name}", self.plural());
                match fence.send(self.storage.clone(), txn, what).await {
                    Ok(Err(refused)) => return Err(refused),
                    Ok(Ok(outcome)) => Ok(outcome),
                    Err(err) => Err(err),
                }
            }
            None => self.storage.txn(txn).await,
        };
        match answer {
            Ok(TxnOutcome::Committed { revision }) => Ok(Committed::At(revision)),
            Ok(TxnOutcome::Failed { index: 0, current }) => {
                Ok(Committed::ObjectChanged { current })
            }
            Ok(TxnOutcome::Failed { .. }) => Err(ApiError::Internal(format!(
                "writing {} {name}: a compare failed",
                self.plural()
            ))),
            Err(err) => Err(self.storage_error(err, name)),
        }
    }

    /// The bytes stored for `obj`: its JSON without a resourceVersion.
    fn encode_for_storage(&self, obj: &S::Object) -> ApiResult<Vec<u8>> {
        let mut stored = obj.clone();
        stored.metadata_mut().resource_version = None;
        serde_json::to_vec(&stored)
            .map_err(|e| ApiError::Internal(format!("encoding {} for storage: {e}", self.kind())))
    }

    fn kind_schemas(&self) -> &KindSchemas {
        self.schemas
            .get_or_init(|| KindSchemas::new(&*self.strategy))
    }

    fn schemas(&self, version: &str) -> Option<&Schemas> {
        self.kind_schemas().validation.get(version)
    }

    /// Strategic merge patch's list rules in `version`.
    fn merge_rules(&self, version: &str) -> MergeRules {
        self.kind_schemas()
            .merge_rules
            .get(version)
            .cloned()
            .unwrap_or_default()
    }

    pub(crate) fn field_manager(&self) -> &FieldManager {
        &self.kind_schemas().fields
    }
}

/// The kind's OpenAPI definitions per served version, read three ways: field validation,
/// strategic merge patch's list rules, and server-side apply's typed schema.
struct KindSchemas {
    validation: BTreeMap<&'static str, Schemas>,
    merge_rules: BTreeMap<&'static str, MergeRules>,
    fields: FieldManager,
}

impl KindSchemas {
    fn new<S: Strategy>(strategy: &S) -> Self {
        let info = strategy.info();
        let mut validation = BTreeMap::new();
        let mut merge_rules = BTreeMap::new();
        let mut typed = BTreeMap::new();
        for version in info.versions {
            let schemas = Schemas::new(strategy.openapi_definitions(version));
            let schema = schemas.typed(&strategy.definition_name(version));
            merge_rules.insert(*version, MergeRules::from_schema(&schema));
            typed.insert(*version, schema);
            validation.insert(*version, schemas);
        }
        KindSchemas {
            validation,
            merge_rules,
            fields: FieldManager::new(info.group, info.kind, typed, info.has_status_subresource),
        }
    }
}

/// A name or namespace used in a key: present, and one path segment (`<what> parameter
/// required.` / `<what> parameter invalid: ...`, upstream's texts).
fn path_segment(what: &str, value: &str) -> ApiResult<()> {
    if value.is_empty() {
        return Err(ApiError::BadRequest(format!("{what} parameter required.")));
    }
    let problem = match value {
        "." | ".." => Some(format!("may not be '{value}'")),
        _ => ["/", "%"]
            .iter()
            .find(|bad| value.contains(**bad))
            .map(|bad| format!("may not contain '{bad}'")),
    };
    match problem {
        Some(problem) => Err(ApiError::BadRequest(format!(
            "{what} parameter invalid: {value:?}: {problem}"
        ))),
        None => Ok(()),
    }
}

/// Decode a stored value; its resourceVersion is `revision` (the key's mod revision, or the
/// revision of the delete for a deleted object's last state).
fn decode_stored<O>(kv: &KeyValue, revision: Revision) -> ApiResult<O>
where
    O: DeserializeOwned + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    let mut obj: O = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::Internal(format!(
            "stored object under {:?} does not decode: {e}",
            kv.key
        ))
    })?;
    obj.metadata_mut().resource_version = Some(revision.to_string());
    Ok(obj)
}

/// Parse a resourceVersion given by a client (`invalid resource version` is a 400).
fn parse_resource_version(rv: &str) -> ApiResult<Revision> {
    rv.parse::<u64>()
        .ok()
        .and_then(|v| Revision::try_from(v).ok())
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "invalid resource version: resourceVersion: Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: invalid syntax"
            ))
        })
}

/// 504 for a resourceVersion the store has not reached (upstream's TooLargeResourceVersion).
fn too_large(requested: Revision, current: Revision) -> ApiError {
    ApiError::Timeout(format!(
        "Timeout: Too large resource version: {requested}, current: {current}"
    ))
}

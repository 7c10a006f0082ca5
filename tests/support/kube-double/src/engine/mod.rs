//! The double's API machinery without HTTP: object lifecycle over the store, following
//! k8s.io/apiserver's generic registry (`store.go`) and etcd3 storage (`GuaranteedUpdate`).
//!
//! - `write`: create, update, patch and delete over `GuaranteedUpdate`, with the no-op rule;
//! - `list`: paged LISTs at consistent revisions;
//! - `patch`: the patch formats.

mod list;
mod patch;
mod write;

use std::sync::{Arc, Mutex, OnceLock, RwLock};

use serde_json::{Value, json};

use crate::apiservers::ApiServers;
use crate::auth::AuthPolicy;
use crate::faults::Faults;
use crate::metrics::Metrics;
use crate::object::{self, set_meta};
use crate::pki::Pki;
use crate::resources::{Catalog, Flavor, GroupResource, ResourceDef, builtin_resources};
use crate::route::object_key;
use crate::status::{ApiResult, StatusError};
use crate::store::{Entry, Store, StoredValue};

pub use list::{EXPIRED_CONTINUE, ListPage, ListParams};
pub use write::{DeleteOutcome, Preconditions, Written, unsupported_patch};

/// Behaviour switches of one double.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Serve watch-list (`sendInitialEvents`) like kube-apiserver on etcd >= 3.5.13
    /// (recording 10b). When false, such watches get the 500 ERROR event of etcd 3.4
    /// (recording 10a).
    pub watch_list: bool,
    /// Serve `internal.apiserver.k8s.io/v1alpha1` storageversions (recording 13).
    pub storage_version_api: bool,
    /// Largest accepted request body (kube-apiserver: 3 MiB, recording 16d).
    pub max_body_bytes: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            watch_list: true,
            storage_version_api: true,
            max_body_bytes: 3 * 1024 * 1024,
        }
    }
}

/// Who writes, and whether for real.
#[derive(Clone, Debug)]
pub struct Writer {
    /// The managedFields manager (`fieldManager`, else the User-Agent up to the first `/`).
    pub manager: String,
    /// `dryRun=All`: everything but the commit.
    pub dry_run: bool,
}

impl Writer {
    /// kube-apiserver writing its own objects.
    pub fn system() -> Self {
        Self {
            manager: "kube-apiserver".into(),
            dry_run: false,
        }
    }
}

/// The state a conditional update starts from.
pub struct Current {
    pub obj: Value,
    pub entry: Entry,
}

pub struct Engine {
    pub catalog: Catalog,
    pub store: Store,
    pub metrics: Metrics,
    pub faults: Faults,
    pub auth: RwLock<AuthPolicy>,
    pub options: EngineOptions,
    pub pki: Pki,
    pub apiservers: Mutex<ApiServers>,
    /// `host:port` the double listens on (the identity leases advertise it).
    pub address: OnceLock<String>,
}

impl Engine {
    pub fn new(options: EngineOptions, pki: Pki) -> Self {
        let defs = builtin_resources()
            .into_iter()
            .filter(|d| options.storage_version_api || d.flavor != Flavor::StorageVersion)
            .collect();
        Self {
            catalog: Catalog::new(defs),
            store: Store::new(),
            metrics: Metrics::default(),
            faults: Faults::default(),
            auth: RwLock::new(AuthPolicy::default()),
            options,
            pki,
            apiservers: Mutex::new(ApiServers::default()),
            address: OnceLock::new(),
        }
    }

    pub fn def(&self, gr: &GroupResource) -> ApiResult<Arc<ResourceDef>> {
        self.catalog
            .get(gr)
            .ok_or_else(|| StatusError::not_found_in(&gr.group, &gr.resource, ""))
    }

    /// The stored object with `metadata.resourceVersion` = its mod revision.
    pub fn decode(&self, entry: &Entry) -> ApiResult<Value> {
        let mut obj = entry
            .value
            .decode()
            .map_err(|e| StatusError::internal(format!("unable to decode stored object: {e}")))?;
        set_meta(
            &mut obj,
            "resourceVersion",
            json!(entry.mod_rev.to_string()),
        );
        Ok(obj)
    }

    /// Encodes an object as it is stored: in the storage version, without resourceVersion,
    /// under the resource's current encryption key.
    pub fn encode(&self, def: &ResourceDef, obj: &Value) -> StoredValue {
        let mut stored = obj.clone();
        let gv = def.storage_group_version();
        stored["apiVersion"] = json!(gv);
        stored["kind"] = json!(def.kind);
        object::remove_meta(&mut stored, "resourceVersion");
        object::remove_meta(&mut stored, "selfLink");
        StoredValue::encode(&stored, &gv, def.encryption_key.as_deref())
    }

    /// An object as served in `version` (internal callers that read, change and write back).
    pub fn get_as(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        version: &str,
    ) -> ApiResult<Value> {
        Ok(present(def, self.get(def, namespace, name)?, version))
    }

    pub fn get(&self, def: &ResourceDef, namespace: Option<&str>, name: &str) -> ApiResult<Value> {
        let key = object_key(namespace, name);
        let entry = self
            .store
            .get(&def.group_resource(), &key)
            .ok_or_else(|| StatusError::not_found(def, name))?;
        self.decode(&entry)
    }

    fn current(&self, def: &ResourceDef, key: &str) -> ApiResult<Option<Current>> {
        match self.store.get(&def.group_resource(), key) {
            None => Ok(None),
            Some(entry) => Ok(Some(Current {
                obj: self.decode(&entry)?,
                entry,
            })),
        }
    }
}

/// An object in the version a client asked for (conversion between versions only changes
/// apiVersion: CRDs here use `conversion.strategy: None`, built-ins have one served version).
pub fn present(def: &ResourceDef, mut obj: Value, version: &str) -> Value {
    obj["apiVersion"] = json!(def.group_version(version));
    obj["kind"] = json!(def.kind);
    obj
}

/// 504 "Too large resource version" (recording 10a, step 4b).
pub fn too_large_resource_version(wanted: u64, current: u64) -> StatusError {
    let mut details = serde_json::Map::new();
    details.insert(
        "causes".into(),
        json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
    );
    details.insert("retryAfterSeconds".into(), json!(1));
    StatusError::new(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {wanted}, current: {current}"),
    )
    .with_details(details)
}

pub fn parse_resource_version(rv: &str) -> ApiResult<u64> {
    rv.parse::<u64>().map_err(|_| {
        StatusError::bad_request(format!(
            "invalid resource version: {}",
            crate::status::go_quote(rv)
        ))
    })
}

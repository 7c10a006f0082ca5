//! Test hooks on the engine: what an upgrade or a key rotation changes, and the
//! `etcdctl get`-style read-back of how each object is stored.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::engine::{Engine, Writer};
use crate::object::{self, name_of};
use crate::resources::{Flavor, GroupResource};
use crate::route::object_key;
use crate::status::{ApiResult, StatusError};

/// How one object sits in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// The group/version it is encoded in (`v1`, `example.test/v1`).
    pub encoding: String,
    /// The encryption key it was written under (`None`: identity, plain JSON).
    pub key: Option<String>,
    /// The stored bytes, as `etcdctl get --print-value-only` shows them.
    pub bytes: Bytes,
    pub mod_revision: u64,
    pub create_revision: u64,
}

impl StoredObject {
    /// The stored JSON without the encryption envelope.
    pub fn json(&self) -> Option<Value> {
        let skip = self
            .key
            .as_ref()
            .map_or(0, |k| crate::store::ENVELOPE_PREFIX.len() + k.len() + 1);
        serde_json::from_slice(self.bytes.get(skip..)?).ok()
    }
}

impl Engine {
    pub fn stored(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<StoredObject> {
        let entry = self.store.get(gr, &object_key(namespace, name))?;
        Some(StoredObject {
            encoding: entry.value.encoding.clone(),
            key: entry.value.key.clone(),
            bytes: entry.value.bytes.clone(),
            mod_revision: entry.mod_rev,
            create_revision: entry.create_rev,
        })
    }

    /// Object counts per (encoding, key) — "how much is left to migrate".
    pub fn stored_summary(&self, gr: &GroupResource) -> BTreeMap<(String, Option<String>), usize> {
        let mut out = BTreeMap::new();
        for entry in self.store.current_entries(gr) {
            *out.entry((entry.value.encoding.clone(), entry.value.key.clone()))
                .or_default() += 1;
        }
        out
    }

    /// Moves a resource's storage version, as an upgrade does: built-ins on every apiserver
    /// instance; a custom resource through its CRD (so `storedVersions` grows and CRD
    /// watchers see the change, recording 11).
    pub fn set_storage_version(&self, gr: &GroupResource, version: &str) -> ApiResult<()> {
        let def = self.def(gr)?;
        if def.flavor != Flavor::Custom {
            return self.set_builtin_storage_version(gr, version);
        }
        let crd_def = self.def(&GroupResource::new(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
        ))?;
        let crd_name = format!("{}.{}", gr.resource, gr.group);
        let mut crd = self.get_as(&crd_def, None, &crd_name, "v1")?;
        let versions = crd["spec"]["versions"]
            .as_array_mut()
            .ok_or_else(|| StatusError::bad_request("the CRD has no spec.versions"))?;
        if !versions.iter().any(|v| v["name"] == version) {
            return Err(StatusError::bad_request(format!(
                "{crd_name} has no version {version}"
            )));
        }
        for v in versions.iter_mut().filter_map(Value::as_object_mut) {
            let is_storage = v.get("name").and_then(Value::as_str) == Some(version);
            v.insert("storage".into(), json!(is_storage));
        }
        self.update(
            &crd_def,
            "v1",
            None,
            name_of(&crd).to_string().as_str(),
            crd.clone(),
            None,
            &Writer::system(),
        )?;
        Ok(())
    }

    /// Rotates the encryption-at-rest write key of a resource (`None`: identity). Objects
    /// keep the key they were written with until rewritten.
    pub fn set_encryption_key(&self, gr: &GroupResource, key: Option<&str>) -> ApiResult<()> {
        self.catalog
            .update(gr, |d| d.encryption_key = key.map(str::to_string))
            .map(|_| ())
            .ok_or_else(|| StatusError::not_found_in(&gr.group, &gr.resource, ""))
    }

    /// Creates `count` objects named `<prefix>-<n>` in `namespace`, each carrying `payload`
    /// bytes of data, the way a benchmark or a migration test fills a cluster.
    pub fn preload(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        prefix: &str,
        count: usize,
        payload_bytes: usize,
    ) -> ApiResult<()> {
        let def = self.def(gr)?;
        if !def.is_stored() {
            return Err(StatusError::bad_request(format!("{gr} cannot be stored")));
        }
        let namespace = namespace.filter(|_| def.namespaced);
        if let Some(ns) = namespace {
            self.ensure_namespace(ns)?;
        }
        let version = def.served_versions.first().cloned().unwrap_or_default();
        let payload = "x".repeat(payload_bytes);
        let writer = Writer {
            manager: "kube-double-preload".into(),
            dry_run: false,
        };
        let width = count.to_string().len().max(5);
        for i in 0..count {
            let name = format!("{prefix}-{i:0width$}");
            let mut obj = json!({
                "apiVersion": def.group_version(&version),
                "kind": def.kind,
                "metadata": {"name": name},
            });
            match def.flavor {
                Flavor::ConfigMap => obj["data"] = json!({"payload": payload}),
                Flavor::Secret => {
                    use base64::Engine as _;
                    obj["data"] = json!({"payload": base64::engine::general_purpose::STANDARD.encode(&payload)});
                }
                Flavor::Namespace => {}
                _ => obj["spec"] = json!({"payload": payload}),
            }
            self.create(&def, &version, namespace, obj, &writer)?;
        }
        Ok(())
    }

    /// Creates a namespace unless it exists.
    pub fn ensure_namespace(&self, namespace: &str) -> ApiResult<()> {
        let def = self.def(&GroupResource::new("", "namespaces"))?;
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        match self.create(&def, "v1", None, ns, &Writer::system()) {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates an object from a full manifest (namespace taken from its metadata).
    pub fn create_manifest(&self, gr: &GroupResource, manifest: Value) -> ApiResult<Value> {
        let def = self.def(gr)?;
        let version = manifest["apiVersion"]
            .as_str()
            .and_then(|av| av.rsplit('/').next())
            .filter(|v| def.serves(v))
            .map(str::to_string)
            .or_else(|| def.served_versions.first().cloned())
            .unwrap_or_default();
        let namespace = object::meta_str(&manifest, "namespace").map(str::to_string);
        self.create(
            &def,
            &version,
            namespace.as_deref(),
            manifest,
            &Writer::system(),
        )
    }
}

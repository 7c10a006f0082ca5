//! The simulated kube-apiserver instances of the cluster: their identity leases in kube-system
//! (recording 12), the StorageVersion objects they publish (recording 13), and which one
//! answers requests. Tests make them disagree (an HA rolling upgrade) or restart (a new
//! identity), and move storage versions as an upgrade would.

use std::collections::HashMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::engine::{Engine, Writer};
use crate::object;
use crate::resources::{GroupResource, ResourceDef, builtin_resources, group_version};
use crate::status::{ApiResult, StatusError};

/// One apiserver process.
#[derive(Clone, Debug)]
pub struct ApiServer {
    /// The identity lease name, `apiserver-<base32(sha256(hostname))[..26]>`.
    pub id: String,
    pub hostname: String,
    /// Encoding versions this instance uses where it differs from the cluster default.
    pub encodings: HashMap<GroupResource, String>,
}

#[derive(Debug, Default)]
pub struct ApiServers {
    pub servers: Vec<ApiServer>,
    /// Index of the instance that answers requests (discovery and writes follow its versions).
    pub serving: usize,
    /// Cluster-wide storage versions set by a test (an upgrade that reached every instance).
    pub defaults: HashMap<GroupResource, String>,
}

impl ApiServers {
    fn encoding(&self, server: &ApiServer, gr: &GroupResource, builtin: &str) -> String {
        server
            .encodings
            .get(gr)
            .or_else(|| self.defaults.get(gr))
            .cloned()
            .unwrap_or_else(|| builtin.to_string())
    }
}

/// `apiserver-` + lowercase unpadded base32 of the first 16 bytes of the sha256 of the
/// hostname and "kube-apiserver", each prefixed with its 16-bit length — how the generic
/// apiserver names its identity lease (recording 12: hostname "vm").
pub fn identity_lease_name(hostname: &str) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut hasher = Sha256::new();
    for part in [hostname.as_bytes(), b"kube-apiserver".as_slice()] {
        let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
        hasher.update(len.to_be_bytes());
        hasher.update(&part[..usize::from(len)]);
    }
    let digest = hasher.finalize();
    let mut out = String::from("apiserver-");
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for byte in &digest[..16] {
        buffer = (buffer << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// The StorageVersion object name: `<group>.<resource>`, `core.<resource>` for the core group.
pub fn storage_version_name(gr: &GroupResource) -> String {
    let group = if gr.group.is_empty() {
        "core"
    } else {
        &gr.group
    };
    format!("{group}.{}", gr.resource)
}

fn builtin_storage_versions() -> HashMap<GroupResource, String> {
    builtin_resources()
        .into_iter()
        .map(|d| (d.group_resource(), d.storage_version))
        .collect()
}

fn leases() -> GroupResource {
    GroupResource::new("coordination.k8s.io", "leases")
}

impl Engine {
    /// Adds an apiserver instance (its identity lease appears, StorageVersion objects list
    /// it). Returns its id.
    pub fn add_apiserver(&self, hostname: &str) -> ApiResult<String> {
        let id = identity_lease_name(hostname);
        {
            let mut servers = self.lock_apiservers();
            if servers.servers.iter().any(|s| s.id == id) {
                return Err(StatusError::already_exists(&*self.def(&leases())?, &id));
            }
            servers.servers.push(ApiServer {
                id: id.clone(),
                hostname: hostname.to_string(),
                encodings: HashMap::new(),
            });
        }
        self.write_identity_lease(&id, hostname)?;
        self.refresh_storage_versions()?;
        Ok(id)
    }

    /// Simulates a restart: the lease is deleted and created again under the same name, as a
    /// new object with a new holderIdentity (recording 12).
    pub fn restart_apiserver(&self, id: &str) -> ApiResult<()> {
        let hostname = self.apiserver(id)?.hostname;
        self.delete_identity_lease(id)?;
        self.write_identity_lease(id, &hostname)?;
        self.refresh_storage_versions()
    }

    /// Removes an instance: its lease goes, and the storage-version GC drops its entries.
    pub fn remove_apiserver(&self, id: &str) -> ApiResult<()> {
        self.apiserver(id)?;
        self.delete_identity_lease(id)?;
        {
            let mut servers = self.lock_apiservers();
            servers.servers.retain(|s| s.id != id);
            if servers.serving >= servers.servers.len() {
                servers.serving = 0;
            }
        }
        self.refresh_storage_versions()
    }

    /// Makes one instance encode `gr` in `version` (the others keep theirs): the
    /// disagreement of a rolling upgrade. kube-apiserver fixes its storage versions when it
    /// starts (they come with the binary and its flags), so the instance restarts: its
    /// identity lease is replaced (recording 12).
    pub fn set_apiserver_encoding(
        &self,
        id: &str,
        gr: &GroupResource,
        version: &str,
    ) -> ApiResult<()> {
        let hostname = {
            let mut servers = self.lock_apiservers();
            let server = servers
                .servers
                .iter_mut()
                .find(|s| s.id == id)
                .ok_or_else(|| StatusError::not_found_in("coordination.k8s.io", "leases", id))?;
            server.encodings.insert(gr.clone(), version.to_string());
            server.hostname.clone()
        };
        self.delete_identity_lease(id)?;
        self.write_identity_lease(id, &hostname)?;
        self.refresh_storage_versions()
    }

    /// Routes requests to instance `id`: discovery and writes follow its encoding versions.
    pub fn serve_from(&self, id: &str) -> ApiResult<()> {
        {
            let mut servers = self.lock_apiservers();
            let index = servers
                .servers
                .iter()
                .position(|s| s.id == id)
                .ok_or_else(|| StatusError::not_found_in("coordination.k8s.io", "leases", id))?;
            servers.serving = index;
        }
        self.refresh_storage_versions()
    }

    /// Sets the storage version of a built-in resource on every instance (a finished upgrade).
    /// Storage versions are fixed when kube-apiserver starts, so every instance restarts, one
    /// after the other as a rolling upgrade does: each identity lease is replaced (recording
    /// 12) once the instance encodes in the new version.
    pub fn set_builtin_storage_version(&self, gr: &GroupResource, version: &str) -> ApiResult<()> {
        let instances: Vec<(String, String)> = {
            let mut servers = self.lock_apiservers();
            servers.defaults.insert(gr.clone(), version.to_string());
            for s in servers.servers.iter_mut() {
                s.encodings.remove(gr);
            }
            servers
                .servers
                .iter()
                .map(|s| (s.id.clone(), s.hostname.clone()))
                .collect()
        };
        self.refresh_storage_versions()?;
        for (id, hostname) in instances {
            self.delete_identity_lease(&id)?;
            self.write_identity_lease(&id, &hostname)?;
        }
        Ok(())
    }

    pub fn apiserver_ids(&self) -> Vec<String> {
        self.lock_apiservers()
            .servers
            .iter()
            .map(|s| s.id.clone())
            .collect()
    }

    fn apiserver(&self, id: &str) -> ApiResult<ApiServer> {
        self.lock_apiservers()
            .servers
            .iter()
            .find(|s| s.id == id)
            .cloned()
            .ok_or_else(|| StatusError::not_found_in("coordination.k8s.io", "leases", id))
    }

    fn lock_apiservers(&self) -> std::sync::MutexGuard<'_, ApiServers> {
        self.apiservers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_identity_lease(&self, id: &str, hostname: &str) -> ApiResult<()> {
        let def = self.def(&leases())?;
        let address = self
            .address
            .get()
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:6443".into());
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": id,
                "namespace": "kube-system",
                "labels": {
                    "apiserver.kubernetes.io/identity": "kube-apiserver",
                    "kubernetes.io/hostname": hostname,
                },
                "annotations": {"kubernetes.io/peer-advertise-address": address},
            },
            "spec": {
                "holderIdentity": format!("{id}_{}", uuid::Uuid::new_v4()),
                "leaseDurationSeconds": 3600,
                "renewTime": object::now_rfc3339_micros(),
            }
        });
        self.create(&def, "v1", Some("kube-system"), lease, &Writer::system())?;
        Ok(())
    }

    /// A renewal: the same holder, a new `renewTime` (a MODIFIED event).
    pub fn renew_identity_lease(&self, id: &str) -> ApiResult<()> {
        let def = self.def(&leases())?;
        let mut lease = self.get_as(&def, Some("kube-system"), id, "v1")?;
        lease["spec"]["renewTime"] = json!(object::now_rfc3339_micros());
        self.update(
            &def,
            "v1",
            Some("kube-system"),
            id,
            lease,
            None,
            &Writer::system(),
        )?;
        Ok(())
    }

    fn delete_identity_lease(&self, id: &str) -> ApiResult<()> {
        let def = self.def(&leases())?;
        match self.delete(
            &def,
            Some("kube-system"),
            id,
            &Default::default(),
            &Writer::system(),
        ) {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Brings the catalogue's storage versions (what discovery hashes and writes use) in line
    /// with the serving instance, and rewrites the StorageVersion objects.
    pub fn refresh_storage_versions(&self) -> ApiResult<()> {
        let builtin = builtin_storage_versions();
        let (serving, per_resource) = {
            let servers = self.lock_apiservers();
            let serving = servers.servers.get(servers.serving).cloned();
            let mut per_resource: Vec<(GroupResource, Vec<(String, String)>)> = Vec::new();
            for (gr, default) in &builtin {
                let entries = servers
                    .servers
                    .iter()
                    .map(|s| (s.id.clone(), servers.encoding(s, gr, default)))
                    .collect();
                per_resource.push((gr.clone(), entries));
            }
            let serving = serving.map(|s| {
                builtin
                    .iter()
                    .map(|(gr, default)| (gr.clone(), servers.encoding(&s, gr, default)))
                    .collect::<HashMap<_, _>>()
            });
            (serving, per_resource)
        };
        for (gr, default) in &builtin {
            let version = serving
                .as_ref()
                .and_then(|m| m.get(gr).cloned())
                .unwrap_or_else(|| default.clone());
            self.catalog.update(gr, |d| d.storage_version = version);
        }
        if !self.options.storage_version_api {
            return Ok(());
        }
        let mut sorted = per_resource;
        sorted.sort_by_key(|a| storage_version_name(&a.0));
        for (gr, entries) in sorted {
            let Some(def) = self.catalog.get(&gr) else {
                continue;
            };
            if !def.is_stored() {
                continue;
            }
            self.publish_storage_version(&def, &entries)?;
        }
        Ok(())
    }

    fn publish_storage_version(
        &self,
        def: &ResourceDef,
        entries: &[(String, String)],
    ) -> ApiResult<()> {
        let sv_def = self.def(&GroupResource::new(
            "internal.apiserver.k8s.io",
            "storageversions",
        ))?;
        let name = storage_version_name(&def.group_resource());
        let served: Vec<String> = def
            .served_versions
            .iter()
            .map(|v| group_version(&def.group, v))
            .collect();
        let mut decodable = served.clone();
        for v in &def.extra_decodable_versions {
            let gv = group_version(&def.group, v);
            if !decodable.contains(&gv) {
                decodable.push(gv);
            }
        }
        let storage_versions: Vec<Value> = entries
            .iter()
            .map(|(id, version)| {
                let encoding = group_version(&def.group, version);
                let mut decodable = decodable.clone();
                if !decodable.contains(&encoding) {
                    decodable.push(encoding.clone());
                }
                json!({
                    "apiServerID": id,
                    "encodingVersion": encoding,
                    "decodableVersions": decodable,
                    "servedVersions": served,
                })
            })
            .collect();
        let encodings: Vec<&str> = storage_versions
            .iter()
            .filter_map(|s| s["encodingVersion"].as_str())
            .collect();
        let common = encodings
            .first()
            .filter(|first| encodings.iter().all(|e| e == *first))
            .map(|s| s.to_string());
        let existing = match self.get_as(&sv_def, None, &name, "v1alpha1") {
            Ok(obj) => Some(obj),
            Err(e) if e.code == 404 => None,
            Err(e) => return Err(e),
        };
        // `setCommonEncodingVersion`: the condition's transition time moves only when its
        // status or the common version changes.
        let (status_word, reason, message) = if common.is_some() {
            (
                "True",
                "CommonEncodingVersionSet",
                "Common encoding version set",
            )
        } else {
            (
                "False",
                "CommonEncodingVersionUnset",
                "Common encoding version unset",
            )
        };
        let old_status = existing.as_ref().map(|o| &o["status"]);
        let old_condition = old_status
            .and_then(|s| s["conditions"].as_array())
            .and_then(|c| {
                c.iter()
                    .find(|c| c["type"] == "AllEncodingVersionsEqual")
                    .cloned()
            });
        let same = old_condition
            .as_ref()
            .is_some_and(|c| c["status"] == status_word)
            && old_status.map(|s| s["commonEncodingVersion"].as_str().map(str::to_string))
                == Some(common.clone());
        let transition = match (&old_condition, same) {
            (Some(c), true) => c["lastTransitionTime"].clone(),
            _ => json!(object::now_rfc3339()),
        };
        let mut status = json!({
            "storageVersions": storage_versions,
            "conditions": [{
                "type": "AllEncodingVersionsEqual",
                "status": status_word,
                "lastTransitionTime": transition,
                "reason": reason,
                "message": message,
            }]
        });
        if let Some(common) = common {
            status["commonEncodingVersion"] = json!(common);
        }
        match existing {
            None => {
                let obj = json!({
                    "apiVersion": "internal.apiserver.k8s.io/v1alpha1",
                    "kind": "StorageVersion",
                    "metadata": {"name": name},
                    "spec": {},
                    "status": status,
                });
                self.create(&sv_def, "v1alpha1", None, obj, &Writer::system())?;
            }
            Some(mut obj) => {
                if obj["status"] == status {
                    return Ok(());
                }
                obj["status"] = status;
                self.update(
                    &sv_def,
                    "v1alpha1",
                    None,
                    &name,
                    obj,
                    Some("status"),
                    &Writer::system(),
                )?;
            }
        }
        Ok(())
    }

    /// The namespaces every cluster has, the authentication ConfigMap for aggregated API
    /// servers, and the first apiserver instance.
    pub fn bootstrap(&self, hostname: &str) -> ApiResult<String> {
        let ns_def = self.def(&GroupResource::new("", "namespaces"))?;
        for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            self.create(&ns_def, "v1", None, obj, &Writer::system())?;
        }
        self.publish_authentication_config()?;
        self.add_apiserver(hostname)
    }

    /// `kube-system/extension-apiserver-authentication` as kube-apiserver publishes it
    /// (recording 14).
    fn publish_authentication_config(&self) -> ApiResult<()> {
        let def = self.def(&GroupResource::new("", "configmaps"))?;
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
            "data": {
                "client-ca-file": self.pki.cluster_ca_pem,
                "requestheader-allowed-names": "[\"front-proxy-client\"]",
                "requestheader-client-ca-file": self.pki.front_proxy_ca_pem,
                "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
                "requestheader-group-headers": "[\"X-Remote-Group\"]",
                "requestheader-username-headers": "[\"X-Remote-User\"]",
            }
        });
        self.create(&def, "v1", Some("kube-system"), cm, &Writer::system())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_name_matches_the_recording() {
        // Recording 12: the rig's hostname is "vm".
        assert_eq!(
            identity_lease_name("vm"),
            "apiserver-wlv32tlttr4jl3gtroqexyxapa"
        );
    }

    #[test]
    fn storage_version_names() {
        assert_eq!(
            storage_version_name(&GroupResource::new("", "configmaps")),
            "core.configmaps"
        );
        assert_eq!(
            storage_version_name(&GroupResource::new("coordination.k8s.io", "leases")),
            "coordination.k8s.io.leases"
        );
    }
}

//! StorageState: one per migrated resource, named `<resource>.<group>` (or `<resource>` for the
//! core group), recording which storage-version hashes the resource's stored objects may still
//! be encoded in. The same shape in every served version (after the out-of-tree migrator's
//! `migration.k8s.io/v1alpha1` StorageState), so the internal form is also the served one.
//!
//! Served in two groups over one store (`<prefix>/storagestates/`): upstream's
//! `storagemigration.k8s.io` (owner mode) and the project's `storage.svm-apiserver.io`
//! (always), so the objects are the same whichever name a client uses, and a switch of
//! mode moves no data.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::columns::{age, age_column, name_column};
use super::openapi::{META, described_ref, reversed_name, string};
use super::served::{check_version, decode_body, encode_body_in};
use super::{ApiGroup, CATEGORY, GROUP, PROJECT, UPSTREAM};
use svm_registry::validation::dns1123_label_errors as dns_label_errors;
use svm_registry::validation::dns1123_subdomain_errors;
use svm_registry::{ApiResult, FieldError, ResourceInfo, Strategy, TableColumn};

/// The kind's name.
pub const KIND: &str = "StorageState";

/// The hash recorded when the server cannot vouch for what objects are stored in.
pub const UNKNOWN_HASH: &str = "Unknown";

/// Which storage-version hashes one resource's stored objects may still be encoded in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageState {
    /// Standard object metadata; the name is [`StorageState::name_for`] the resource.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The resource it describes.
    #[serde(default)]
    pub spec: StorageStateSpec,
    /// The hashes, as the trigger keeps them.
    #[serde(default)]
    pub status: StorageStateStatus,
}

/// The resource a StorageState describes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageStateSpec {
    /// The resource's group and plural name.
    #[serde(default)]
    pub resource: GroupResource,
}

/// A group and a resource, without a version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupResource {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The plural resource name, e.g. `deployments`.
    #[serde(default)]
    pub resource: String,
}

/// The storage-version hashes of a resource: the current one and those stored objects may be in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageStateStatus {
    /// Hashes the stored objects may be encoded in; `["Unknown"]` when none is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persisted_storage_version_hashes: Vec<String>,
    /// The hash of the current storage version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_storage_version_hash: String,
    /// When the trigger last confirmed this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
}

impl StorageState {
    /// The name a StorageState of `group`/`resource` must have.
    pub fn name_for(group: &str, resource: &str) -> String {
        if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        }
    }
}

impl k8s_openapi::Resource for StorageState {
    const API_VERSION: &'static str = "storagemigration.k8s.io/v1";
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "storagestates";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for StorageState {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

const fn info_in(group: ApiGroup) -> ResourceInfo {
    ResourceInfo {
        group: group.name,
        kind: KIND,
        list_kind: "StorageStateList",
        plural: "storagestates",
        singular: "storagestate",
        short_names: &["ss"],
        categories: &[CATEGORY],
        versions: group.versions,
        storage_version: group.storage_version,
        namespaced: false,
        has_status_subresource: true,
    }
}

static UPSTREAM_INFO: ResourceInfo = info_in(UPSTREAM);
static PROJECT_INFO: ResourceInfo = info_in(PROJECT);

/// StorageState's strategy in one of the groups it is served in; the default is upstream's
/// group (the one the controllers' typed store uses; the stored form is the same in both).
#[derive(Debug, Clone, Copy)]
pub struct StorageStateStrategy {
    info: &'static ResourceInfo,
}

impl Default for StorageStateStrategy {
    fn default() -> Self {
        Self::served_in(UPSTREAM)
    }
}

impl StorageStateStrategy {
    /// The strategy for `group`: [`UPSTREAM`] or [`PROJECT`].
    pub fn served_in(group: ApiGroup) -> Self {
        let info = if group == PROJECT {
            &PROJECT_INFO
        } else {
            &UPSTREAM_INFO
        };
        Self { info }
    }
}

/// `["Unknown"]` when no hash is recorded: nothing is known about what is stored.
fn default_persisted(status: &mut StorageStateStatus) {
    if status.persisted_storage_version_hashes.is_empty() {
        status.persisted_storage_version_hashes = vec![UNKNOWN_HASH.to_string()];
    }
}

impl Strategy for StorageStateStrategy {
    type Object = StorageState;

    fn info(&self) -> &ResourceInfo {
        self.info
    }

    fn decode(&self, version: &str, value: Value) -> ApiResult<StorageState> {
        check_version(self.info, version)?;
        decode_body(KIND, version, value)
    }

    fn encode(&self, version: &str, obj: &StorageState) -> ApiResult<Value> {
        check_version(self.info, version)?;
        encode_body_in(self.info.group, KIND, version, obj)
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        definitions(self.info.group, &self.definition_name(version), version)
    }

    fn definition_name(&self, version: &str) -> String {
        definition_name(self.info.group, version)
    }

    fn prepare_for_create(&self, obj: &mut StorageState) {
        obj.status = StorageStateStatus::default();
        default_persisted(&mut obj.status);
    }

    fn prepare_for_update(&self, new: &mut StorageState, old: &StorageState) {
        new.status = old.status.clone();
    }

    fn prepare_for_status_update(&self, new: &mut StorageState, old: &StorageState) {
        new.spec = old.spec.clone();
        default_persisted(&mut new.status);
    }

    fn validate(&self, obj: &StorageState) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let GroupResource { group, resource } = &obj.spec.resource;
        if resource.is_empty() {
            errs.push(FieldError::required("spec.resource.resource", ""));
        } else {
            for msg in dns_label_errors(resource) {
                errs.push(FieldError::invalid(
                    "spec.resource.resource",
                    resource,
                    &msg,
                ));
            }
        }
        if !group.is_empty() {
            for msg in dns1123_subdomain_errors(group) {
                errs.push(FieldError::invalid("spec.resource.group", group, &msg));
            }
        }
        let want = StorageState::name_for(group, resource);
        let name = obj.metadata.name.clone().unwrap_or_default();
        if !resource.is_empty() && !name.is_empty() && name != want {
            errs.push(FieldError::invalid(
                "metadata.name",
                &name,
                &format!("must be {want:?}: <resource>.<group> of spec.resource, or <resource> for the core group"),
            ));
        }
        errs
    }

    /// A label or annotation of ours under its old `storagemigration.k8s.io/` spelling (users
    /// annotate StorageStates with the refused-object policy).
    fn warnings_on_create(&self, obj: &StorageState) -> Vec<String> {
        crate::names::old_name_warnings(&obj.metadata, None)
    }

    /// The same, for what the update adds or changes.
    fn warnings_on_update(&self, new: &StorageState, old: &StorageState) -> Vec<String> {
        crate::names::old_name_warnings(&new.metadata, Some(&old.metadata))
    }

    fn validate_update(&self, new: &StorageState, old: &StorageState) -> Vec<FieldError> {
        let mut errs = self.validate(new);
        if new.spec != old.spec {
            errs.push(FieldError::invalid(
                "spec",
                &serde_json::to_string(&new.spec).unwrap_or_default(),
                "field is immutable",
            ));
        }
        errs
    }

    fn validate_status_update(&self, new: &StorageState, _old: &StorageState) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (i, hash) in new
            .status
            .persisted_storage_version_hashes
            .iter()
            .enumerate()
        {
            let path = format!("status.persistedStorageVersionHashes[{i}]");
            if hash.is_empty() {
                errs.push(FieldError::required(path, "a hash must not be empty"));
            } else if !seen.insert(hash.as_str()) {
                errs.push(FieldError::duplicate(path, hash));
            }
        }
        errs
    }

    fn spec_changed(&self, new: &StorageState, old: &StorageState) -> bool {
        new.spec != old.spec
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        vec![
            name_column(),
            TableColumn {
                name: "Current",
                type_: "string",
                format: "",
                description: "The hash of the resource's current storage version.",
                priority: 0,
            },
            TableColumn {
                name: "Persisted",
                type_: "string",
                format: "",
                description: "The storage-version hashes stored objects may still be encoded in.",
                priority: 0,
            },
            TableColumn {
                name: "Heartbeat",
                type_: "string",
                format: "",
                description: "Time since the trigger last confirmed this state.",
                priority: 0,
            },
            age_column(),
        ]
    }

    fn table_row(&self, obj: &StorageState) -> Vec<Value> {
        let status = &obj.status;
        let current = if status.current_storage_version_hash.is_empty() {
            "<none>".to_string()
        } else {
            status.current_storage_version_hash.clone()
        };
        let heartbeat = match &status.last_heartbeat_time {
            Some(time) => age(Some(time)),
            None => "<none>".to_string(),
        };
        vec![
            json!(obj.metadata.name.clone().unwrap_or_default()),
            json!(current),
            json!(status.persisted_storage_version_hashes.join(",")),
            json!(heartbeat),
            json!(age(obj.metadata.creation_timestamp.as_ref())),
        ]
    }
}

/// OpenAPI definition names: upstream's group as Kubernetes names its built-ins
/// (`io.k8s.api.storagemigration.v1.StorageState`), any other by its reversed domain
/// (`io.svm-apiserver.storage.v1alpha1.StorageState`), as CRDs are named.
fn definition_name(group: &str, version: &str) -> String {
    if group == GROUP {
        format!("io.k8s.api.storagemigration.{version}.{KIND}")
    } else {
        reversed_name(group, version, KIND)
    }
}

fn definitions(group: &str, name: &str, version: &str) -> Vec<(String, Value)> {
    let name = name.to_string();
    vec![
        (
            name.clone(),
            json!({
                "description": "StorageState records, for one resource, the storage-version hashes its stored objects may still be encoded in. Named <resource>.<group>, or <resource> for the core group.",
                "type": "object",
                "properties": {
                    "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
                    "kind": string("Kind is a string value representing the REST resource this object represents."),
                    "metadata": described_ref(&format!("{META}.ObjectMeta"), "Standard object metadata."),
                    "spec": described_ref(&format!("{name}Spec"), "The resource this state is about."),
                    "status": described_ref(&format!("{name}Status"), "What is known of the resource's stored encodings."),
                },
                "x-kubernetes-group-version-kind": [{"group": group, "kind": KIND, "version": version}],
            }),
        ),
        (
            format!("{name}Spec"),
            json!({
                "description": "The resource a StorageState describes.",
                "type": "object",
                "required": ["resource"],
                "properties": {
                    "resource": described_ref(&format!("{name}GroupResource"), "The group and plural resource name. Immutable; must match metadata.name."),
                },
            }),
        ),
        (
            format!("{name}GroupResource"),
            json!({
                "description": "A group and a resource.",
                "type": "object",
                "properties": {
                    "group": {"type": "string", "default": "", "description": "The API group; empty for the core group."},
                    "resource": {"type": "string", "default": "", "description": "The plural resource name, e.g. deployments."},
                },
            }),
        ),
        (
            format!("{name}Status"),
            json!({
                "description": "Status of a StorageState.",
                "type": "object",
                "properties": {
                    "persistedStorageVersionHashes": {
                        "description": "The hashes of the storage versions the resource's stored objects may be encoded in. \"Unknown\" means the server cannot vouch for them (the default).",
                        "type": "array",
                        "items": {"type": "string", "default": ""},
                    },
                    "currentStorageVersionHash": string("The hash of the resource's current storage version, as discovery reports it; \"Unknown\" while apiservers disagree."),
                    "lastHeartbeatTime": described_ref(&format!("{META}.Time"), "When the trigger last confirmed this state."),
                },
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, group: &str, resource: &str) -> StorageState {
        StorageState {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: StorageStateSpec {
                resource: GroupResource {
                    group: group.into(),
                    resource: resource.into(),
                },
            },
            status: Default::default(),
        }
    }

    #[test]
    fn the_name_must_be_resource_dot_group() {
        let s = StorageStateStrategy::default();
        assert!(
            s.validate(&state("deployments.apps", "apps", "deployments"))
                .is_empty()
        );
        assert!(s.validate(&state("secrets", "", "secrets")).is_empty());
        let errs = s.validate(&state("wrong", "apps", "deployments"));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.name");
        assert!(errs[0].message.contains("deployments.apps"));
        assert!(!s.validate(&state("secrets.", "", "secrets")).is_empty());
        let errs = s.validate(&state("x", "apps", ""));
        assert_eq!(errs[0].field, "spec.resource.resource");
        assert!(
            !s.validate(&state("Deploy.apps", "apps", "Deploy"))
                .is_empty()
        );
        assert!(
            !s.validate(&state("d.Bad_Group", "Bad_Group", "d"))
                .is_empty()
        );
    }

    #[test]
    fn create_defaults_persisted_hashes_to_unknown_and_spec_is_immutable() {
        let s = StorageStateStrategy::default();
        let mut obj = state("deployments.apps", "apps", "deployments");
        obj.status.current_storage_version_hash = "abc".into();
        s.prepare_for_create(&mut obj);
        assert_eq!(obj.status.persisted_storage_version_hashes, vec!["Unknown"]);
        assert_eq!(obj.status.current_storage_version_hash, "");
        let mut changed = obj.clone();
        changed.spec.resource.resource = "statefulsets".into();
        changed.metadata.name = Some("statefulsets.apps".into());
        let errs = s.validate_update(&changed, &obj);
        assert!(
            errs.iter()
                .any(|e| e.field == "spec" && e.message.contains("immutable"))
        );
    }

    #[test]
    fn status_hashes_must_be_distinct_and_non_empty() {
        let s = StorageStateStrategy::default();
        let old = state("secrets", "", "secrets");
        let mut new = old.clone();
        new.status.persisted_storage_version_hashes = vec!["a".into(), "a".into(), "".into()];
        let errs = s.validate_status_update(&new, &old);
        assert_eq!(errs.len(), 2, "{errs:?}");
        // A status update keeps the spec.
        let mut new = old.clone();
        new.spec.resource.resource = "configmaps".into();
        s.prepare_for_status_update(&mut new, &old);
        assert_eq!(new.spec, old.spec);
        assert_eq!(new.status.persisted_storage_version_hashes, vec!["Unknown"]);
    }

    #[test]
    fn every_version_round_trips_and_carries_type_meta() {
        let s = StorageStateStrategy::default();
        let mut obj = state("deployments.apps", "apps", "deployments");
        obj.status = StorageStateStatus {
            persisted_storage_version_hashes: vec!["a".into(), "b".into()],
            current_storage_version_hash: "b".into(),
            last_heartbeat_time: None,
        };
        for v in crate::VERSIONS {
            let encoded = s.encode(v, &obj).unwrap();
            assert_eq!(
                encoded["apiVersion"],
                format!("storagemigration.k8s.io/{v}")
            );
            assert_eq!(encoded["kind"], "StorageState");
            assert_eq!(encoded["status"]["currentStorageVersionHash"], "b");
            assert_eq!(s.decode(v, encoded).unwrap(), obj);
        }
        assert!(s.encode("v2", &obj).is_err());
        let bad = json!({"spec": {"resource": "deployments"}});
        let err = s.decode("v1", bad).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(
            err.to_string()
                .contains("cannot be handled as a StorageState")
        );
    }

    #[test]
    fn the_project_group_serves_the_same_object_under_its_own_name() {
        let upstream = StorageStateStrategy::default();
        let project = StorageStateStrategy::served_in(PROJECT);
        assert_eq!(project.info().group, "storage.svm-apiserver.io");
        assert_eq!(project.info().versions, ["v1alpha1"]);
        assert_eq!(project.info().plural, upstream.info().plural);
        let mut obj = state("deployments.apps", "apps", "deployments");
        obj.status.current_storage_version_hash = "b".into();
        let encoded = project.encode("v1alpha1", &obj).unwrap();
        assert_eq!(encoded["apiVersion"], "storage.svm-apiserver.io/v1alpha1");
        // The same internal form, whichever group it came through.
        assert_eq!(project.decode("v1alpha1", encoded).unwrap(), obj);
        assert!(project.encode("v1", &obj).is_err());
        assert_eq!(
            project.definition_name("v1alpha1"),
            "io.svm-apiserver.storage.v1alpha1.StorageState"
        );
        let definitions = project.openapi_definitions("v1alpha1");
        assert_eq!(
            definitions[0].0,
            "io.svm-apiserver.storage.v1alpha1.StorageState"
        );
        assert_eq!(
            definitions[0].1["x-kubernetes-group-version-kind"][0]["group"],
            "storage.svm-apiserver.io"
        );
        assert!(
            definitions[0].1["properties"]["spec"]["allOf"][0]["$ref"]
                .as_str()
                .is_some_and(|r| r.ends_with("io.svm-apiserver.storage.v1alpha1.StorageStateSpec"))
        );
        assert_eq!(
            upstream.definition_name("v1"),
            "io.k8s.api.storagemigration.v1.StorageState"
        );
    }

    #[test]
    fn table_rows_show_hashes_and_heartbeat() {
        let s = StorageStateStrategy::default();
        let mut obj = state("secrets", "", "secrets");
        obj.status.persisted_storage_version_hashes = vec!["Unknown".into(), "h2".into()];
        obj.status.current_storage_version_hash = "h2".into();
        let row = s.table_row(&obj);
        assert_eq!(row.len(), s.table_columns().len());
        assert_eq!(row[0], "secrets");
        assert_eq!(row[1], "h2");
        assert_eq!(row[2], "Unknown,h2");
        assert_eq!(row[3], "<none>");
    }
}

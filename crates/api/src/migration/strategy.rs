//! How the generic store treats StorageVersionMigrations (upstream
//! pkg/registry/storagemigration/storagemigration/strategy.go and
//! pkg/apis/storagemigration/validation).

use serde_json::{Value, json};

use super::{
    FAILED, KIND, MigrationProgress, ON_OBJECT_FAILURE_ANNOTATION, ON_OBJECT_FAILURE_VALUES,
    RUNNING, SUCCEEDED, StorageVersionMigration, schema, versions,
};
use crate::columns::{age, age_column, name_column};
use crate::names::Place;
use crate::{CATEGORY, GROUP, STORAGE_VERSION, VERSIONS};
use svm_registry::validation::dns1123_label_errors as dns_label_errors;
use svm_registry::validation::dns1123_subdomain_errors;
use svm_registry::{ApiResult, FieldError, ResourceInfo, Strategy, TableColumn};

static INFO: ResourceInfo = ResourceInfo {
    group: GROUP,
    kind: KIND,
    list_kind: "StorageVersionMigrationList",
    plural: "storageversionmigrations",
    singular: "storageversionmigration",
    short_names: &["svm"],
    categories: &[CATEGORY],
    versions: VERSIONS,
    storage_version: STORAGE_VERSION,
    namespaced: false,
    has_status_subresource: true,
};

const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];
const MAX_REASON: usize = 1024;
const MAX_MESSAGE: usize = 32 * 1024;

/// How the generic store creates, updates, validates, converts and prints
/// StorageVersionMigrations (cluster-scoped, with a `/status` subresource).
#[derive(Debug, Default, Clone, Copy)]
pub struct MigrationStrategy;

impl Strategy for MigrationStrategy {
    type Object = StorageVersionMigration;

    fn info(&self) -> &ResourceInfo {
        &INFO
    }

    fn decode(&self, version: &str, value: Value) -> ApiResult<StorageVersionMigration> {
        versions::decode(version, value)
    }

    fn encode(&self, version: &str, obj: &StorageVersionMigration) -> ApiResult<Value> {
        versions::encode(version, obj)
    }

    fn protobuf(&self) -> Option<&'static dyn svm_registry::protobuf::ProtobufKind> {
        Some(&super::proto::MigrationProtobuf)
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        schema::definitions(version)
    }

    fn definition_name(&self, version: &str) -> String {
        schema::definition_name(version)
    }

    /// Upstream: status is cleared on create (only the controller writes it, via /status).
    fn prepare_for_create(&self, obj: &mut StorageVersionMigration) {
        obj.status = Default::default();
    }

    fn prepare_for_update(&self, new: &mut StorageVersionMigration, old: &StorageVersionMigration) {
        new.status = old.status.clone();
    }

    /// `/status` keeps spec; a condition without a transition time gets "now" (v1alpha1's
    /// lastUpdateTime is optional, metav1.Condition's is required: defaulting keeps both valid).
    ///
    /// A status write without `status.progress` keeps the stored one. The field is ours: no
    /// Kubernetes client's types have it, so client-go, reading a migration and writing its
    /// status back, sends it without, and the migrator's checkpoint would go with it (a
    /// restart would then migrate the resource from the start). kube-apiserver's strategies
    /// keep what a client leaves out the same way (a Service's allocated cluster IPs and node
    /// ports, `PatchAllocatedValues`). Decoding cannot tell `"progress": null` from an absent field
    /// (nor can kube-apiserver's), and a patch that removes it arrives here as the same absent
    /// field; an empty one is what a server-side apply leaves when it removes every field it
    /// took. So no status write clears it: one that carries progress replaces it, and only
    /// deleting the migration removes it. Nobody needs more: the migrator never clears it, a
    /// finished migration's progress is its record, and a migration is started over by
    /// deleting and creating it again.
    fn prepare_for_status_update(
        &self,
        new: &mut StorageVersionMigration,
        old: &StorageVersionMigration,
    ) {
        new.spec = old.spec.clone();
        if new
            .status
            .progress
            .as_ref()
            .is_none_or(|p| *p == MigrationProgress::default())
        {
            new.status.progress.clone_from(&old.status.progress);
        }
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(
                k8s_openapi::jiff::Timestamp::now().as_second(),
            )
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()),
        );
        for condition in &mut new.status.conditions {
            if condition.last_transition_time.is_none() {
                condition.last_transition_time = Some(now.clone());
            }
        }
    }

    fn validate(&self, obj: &StorageVersionMigration) -> Vec<FieldError> {
        let mut errs = validate_spec(obj);
        errs.extend(validate_policy(obj));
        errs
    }

    /// Upstream: `spec` is immutable.
    fn validate_update(
        &self,
        new: &StorageVersionMigration,
        old: &StorageVersionMigration,
    ) -> Vec<FieldError> {
        let mut errs = validate_spec(new);
        errs.extend(validate_policy(new));
        if new.spec != old.spec {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: "spec".into(),
                message: format!("Invalid value: {}: field is immutable", spec_text(new)),
            });
        }
        errs
    }

    fn validate_status_update(
        &self,
        new: &StorageVersionMigration,
        old: &StorageVersionMigration,
    ) -> Vec<FieldError> {
        let mut errs = validate_conditions(new);
        let (new_rv, old_rv) = (&new.status.resource_version, &old.status.resource_version);
        if !old_rv.is_empty() && new_rv != old_rv {
            errs.push(FieldError::invalid(
                "status.resourceVersion",
                new_rv,
                "field is immutable",
            ));
        }
        // Upstream: a finished migration stays finished.
        for terminal in [SUCCEEDED, FAILED] {
            if old.condition_true(terminal).is_some() && new.condition_true(terminal).is_none() {
                errs.push(FieldError::invalid(
                    "status.conditions",
                    terminal,
                    &format!("{terminal} condition cannot be set to false once it is true"),
                ));
            }
        }
        if let Some(progress) = &new.status.progress {
            if progress.migrated_objects < 0 {
                errs.push(FieldError::invalid(
                    "status.progress.migratedObjects",
                    &progress.migrated_objects.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
            if progress.remaining_objects.is_some_and(|n| n < 0) {
                errs.push(FieldError::invalid(
                    "status.progress.remainingObjects",
                    &progress.remaining_objects.unwrap_or_default().to_string(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        errs
    }

    fn spec_changed(&self, new: &StorageVersionMigration, old: &StorageVersionMigration) -> bool {
        new.spec != old.spec
    }

    /// A label or annotation of ours under its old `storagemigration.k8s.io/` spelling.
    fn warnings_on_create(&self, obj: &StorageVersionMigration) -> Vec<String> {
        crate::names::old_name_warnings(&obj.metadata, None)
    }

    /// The same, for what the update adds or changes.
    fn warnings_on_update(
        &self,
        new: &StorageVersionMigration,
        old: &StorageVersionMigration,
    ) -> Vec<String> {
        crate::names::old_name_warnings(&new.metadata, Some(&old.metadata))
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        vec![
            name_column(),
            TableColumn {
                name: "Resource",
                type_: "string",
                format: "",
                description: "The resource that is being migrated, as <resource>.<group>.",
                priority: 0,
            },
            TableColumn {
                name: "Status",
                type_: "string",
                format: "",
                description: "The condition that is true: Running, Succeeded or Failed; Pending before the migrator starts.",
                priority: 0,
            },
            TableColumn {
                name: "Migrated",
                type_: "integer",
                format: "",
                description: "Objects rewritten in the current storage version so far.",
                priority: 0,
            },
            TableColumn {
                name: "Remaining",
                type_: "string",
                format: "",
                description: "The target apiserver's estimate of objects still to migrate.",
                priority: 0,
            },
            age_column(),
            TableColumn {
                name: "Message",
                type_: "string",
                format: "",
                description: "The message of the condition that is true: the counts (migrated, remaining, failed) and, when it ended, how.",
                priority: 1,
            },
        ]
    }

    fn table_row(&self, obj: &StorageVersionMigration) -> Vec<Value> {
        let resource = &obj.spec.resource;
        let qualified = if resource.group.is_empty() {
            resource.resource.clone()
        } else {
            format!("{}.{}", resource.resource, resource.group)
        };
        let progress = obj.status.progress.as_ref();
        let remaining = progress
            .and_then(|p| p.remaining_objects)
            .map_or_else(|| "<unknown>".to_string(), |n| n.to_string());
        vec![
            json!(obj.metadata.name.clone().unwrap_or_default()),
            json!(qualified),
            json!(obj.phase()),
            json!(progress.map_or(0, |p| p.migrated_objects)),
            json!(remaining),
            json!(age(obj.metadata.creation_timestamp.as_ref())),
            json!(phase_message(obj)),
        ]
    }
}

/// The message of the condition the phase names (`-o wide`'s last column).
fn phase_message(obj: &StorageVersionMigration) -> String {
    [SUCCEEDED, FAILED, RUNNING]
        .into_iter()
        .find_map(|t| obj.condition_true(t))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The [`ON_OBJECT_FAILURE_ANNOTATION`] policy, when set, is one the migrator knows: a typo
/// must not silently mean the default. Under its old spelling too, which is still read.
fn validate_policy(obj: &StorageVersionMigration) -> Vec<FieldError> {
    let Some(annotations) = obj.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    let old = crate::names::old_spelling(ON_OBJECT_FAILURE_ANNOTATION, Place::Annotation);
    [Some(ON_OBJECT_FAILURE_ANNOTATION), old]
        .into_iter()
        .flatten()
        .filter_map(|key| annotations.get(key).map(|v| (key, v)))
        .filter(|(_, v)| !ON_OBJECT_FAILURE_VALUES.contains(&v.as_str()))
        .map(|(key, v)| {
            FieldError::not_supported(
                format!("metadata.annotations[{key}]"),
                v,
                &ON_OBJECT_FAILURE_VALUES,
            )
        })
        .collect()
}

/// The spec as Go renders the internal struct in a field error: JSON of its fields, the
/// untagged `Resource` capitalized (recording 18, step 13).
fn spec_text(obj: &StorageVersionMigration) -> String {
    let resource = &obj.spec.resource;
    let mut rendered = serde_json::json!({
        "Resource": {"group": resource.group, "resource": resource.resource},
    });
    if !resource.version.is_empty() {
        rendered["Resource"]["version"] = serde_json::json!(resource.version);
    }
    if !obj.spec.continue_token.is_empty() {
        rendered["ContinueToken"] = serde_json::json!(obj.spec.continue_token);
    }
    rendered.to_string()
}

fn validate_spec(obj: &StorageVersionMigration) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let resource = &obj.spec.resource;
    if resource.resource.is_empty() {
        errs.push(FieldError::required(
            "spec.resource.resource",
            "resource is required",
        ));
    } else {
        for msg in dns_label_errors(&resource.resource) {
            errs.push(FieldError::invalid(
                "spec.resource.resource",
                &resource.resource,
                &msg,
            ));
        }
    }
    if !resource.group.is_empty() {
        for msg in dns1123_subdomain_errors(&resource.group) {
            errs.push(FieldError::invalid(
                "spec.resource.group",
                &resource.group,
                &msg,
            ));
        }
    }
    if !resource.version.is_empty() {
        for msg in dns_label_errors(&resource.version) {
            errs.push(FieldError::invalid(
                "spec.resource.version",
                &resource.version,
                &msg,
            ));
        }
    }
    errs
}

/// metav1 `ValidateConditions` plus upstream SVM's rules on which may be true together.
fn validate_conditions(obj: &StorageVersionMigration) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in obj.status.conditions.iter().enumerate() {
        let path = format!("status.conditions[{i}]");
        if c.type_.is_empty() {
            errs.push(FieldError::required(format!("{path}.type"), ""));
        } else if !seen.insert(c.type_.as_str()) {
            errs.push(FieldError::duplicate(format!("{path}.type"), &c.type_));
        }
        if !CONDITION_STATUSES.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                format!("{path}.status"),
                &c.status,
                &CONDITION_STATUSES,
            ));
        }
        if c.observed_generation.is_some_and(|g| g < 0) {
            errs.push(FieldError::invalid(
                format!("{path}.observedGeneration"),
                &c.observed_generation.unwrap_or_default().to_string(),
                "must be greater than or equal to zero",
            ));
        }
        errs.extend(validate_reason(&path, &c.reason));
        if c.message.len() > MAX_MESSAGE {
            errs.push(FieldError::invalid(
                format!("{path}.message"),
                "<long message>",
                &format!("must be no more than {MAX_MESSAGE} characters"),
            ));
        }
    }
    // Running may stay True beside Succeeded (kube-apiserver 1.36 takes it: recording 18,
    // step 8); Succeeded and Failed exclude each other.
    let succeeded = obj.condition_true(SUCCEEDED).is_some();
    let failed = obj.condition_true(FAILED).is_some();
    if succeeded && failed {
        errs.push(FieldError::invalid(
            "status.conditions",
            "Succeeded, Failed",
            "Both success and failed conditions cannot be true at the same time",
        ));
    }
    errs
}

/// A condition's reason, when it has one: metav1.Condition's length and CamelCase-ish form.
fn validate_reason(path: &str, reason: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if reason.is_empty() {
        return errs;
    }
    if reason.len() > MAX_REASON {
        errs.push(FieldError::invalid(
            format!("{path}.reason"),
            reason,
            &format!("must be no more than {MAX_REASON} characters"),
        ));
    }
    if !reason_is_valid(reason) {
        errs.push(FieldError::invalid(
            format!("{path}.reason"),
            reason,
            "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')",
        ));
    }
    errs
}

/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
fn reason_is_valid(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let Some((&first, rest)) = bytes.split_first() else {
        return false;
    };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    let inner_ok = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    match rest.split_last() {
        None => true,
        Some((last, middle)) => {
            (last.is_ascii_alphanumeric() || *last == b'_') && middle.iter().all(inner_ok)
        }
    }
}

#[cfg(test)]
mod tests;

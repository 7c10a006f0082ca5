//! VolumeClaimMigration (`storage.svm-apiserver.io/v1alpha1`, namespaced): bring the existing
//! PersistentVolumeClaims of a StatefulSet up to the sizes of its `volumeClaimTemplates`,
//! ordinal by ordinal. The semantics are those of OpenKruise's "AdvancedStatefulSetVolumeResize"
//! proposal: `OnDelete` (default) or `OnPodRollingUpdate`, expansion only, a clear error stops
//! the rollout, an ambiguous one is retried for `maxWaitTime`, nothing is ever deleted.
//!
//! One served version, so the internal form is the served one. This module is the kind's
//! types and strategy only: the generic store serves it.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::columns::{age, age_column, name_column};
use super::openapi::{META, described_ref, int32, list_map, reference, reversed_name, string};
use super::served::{check_version, decode_body, encode_body_in};
use super::{CATEGORY, PROJECT};
use svm_registry::validation::{dns1123_label_errors, dns1123_subdomain_errors};
use svm_registry::{ApiResult, FieldError, ResourceInfo, Strategy, TableColumn};

/// The kind's name.
pub const KIND: &str = "VolumeClaimMigration";

/// Targets the controller knows: apps/v1 StatefulSets and OpenKruise's Advanced StatefulSets.
pub const TARGET_API_VERSIONS: &[&str] = &["apps/v1", "apps.kruise.io/v1beta1"];
/// The one kind `spec.target` may name (in either of [`TARGET_API_VERSIONS`]).
pub const TARGET_KIND: &str = "StatefulSet";

/// `spec.volumeClaimUpdateStrategy` (the default): a claim is brought up to date only when it is
/// deleted and re-created.
pub const ON_DELETE: &str = "OnDelete";
/// `spec.volumeClaimUpdateStrategy`: claims are expanded in place, each before its pod is rolled.
pub const ON_POD_ROLLING_UPDATE: &str = "OnPodRollingUpdate";
const STRATEGIES: &[&str] = &[ON_DELETE, ON_POD_ROLLING_UPDATE];

/// The proposal's default wait for an ambiguous failure before the claim is reported failed.
pub const DEFAULT_MAX_WAIT_TIME: &str = "60s";

/// Condition types, in the order the STATUS column prefers them.
pub const SUCCEEDED: &str = "Succeeded";
/// A clear error, or an ambiguous one past `maxWaitTime`, stopped the rollout.
pub const FAILED: &str = "Failed";
/// `spec.paused` is set: no resize is issued.
pub const PAUSED: &str = "Paused";
/// Claims are being resized (or the StatefulSet re-created with the new templates).
pub const RUNNING: &str = "Running";

/// A request to bring the claims of one StatefulSet up to the sizes of its templates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeClaimMigration {
    /// Standard object metadata (namespaced).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The StatefulSet, the sizes, and the rollout.
    #[serde(default)]
    pub spec: VolumeClaimMigrationSpec,
    /// How far the migration is, as the controller writes it.
    #[serde(default)]
    pub status: VolumeClaimMigrationStatus,
}

/// What the claims must become, and how the rollout goes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimMigrationSpec {
    /// The StatefulSet, in the migration's namespace.
    #[serde(default)]
    pub target: Target,
    /// The size each template's claims must reach. Required for apps/v1 (whose templates are
    /// immutable); for an Advanced StatefulSet, empty means "the target's own templates".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<TemplateSize>,
    /// `OnDelete` (default) or `OnPodRollingUpdate`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub volume_claim_update_strategy: String,
    /// How many pods may be unavailable at once during the rollout (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<i32>,
    /// How long an ambiguous failure is retried (Go duration, default 60s).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub max_wait_time: String,
    /// Stop issuing resizes until unset.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// apps/v1 only: when done, re-create the StatefulSet with orphan cascade so that its
    /// templates say the new sizes (pods and claims kept, uids unchanged).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recreate_stateful_set: bool,
}

/// The StatefulSet a migration acts on, in the migration's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// `apps/v1` or `apps.kruise.io/v1beta1` (OpenKruise's Advanced StatefulSet).
    #[serde(default)]
    pub api_version: String,
    /// Always [`TARGET_KIND`].
    #[serde(default)]
    pub kind: String,
    /// The StatefulSet's name.
    #[serde(default)]
    pub name: String,
}

/// The size one volumeClaimTemplate's claims must reach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateSize {
    /// The volumeClaimTemplate's name.
    #[serde(default)]
    pub name: String,
    /// The requested size, a Kubernetes quantity (e.g. `100Gi`).
    #[serde(default)]
    pub storage: String,
}

/// How far a VolumeClaimMigration is: done when `observedGeneration` is the object's
/// generation and every template's counts are equal.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimMigrationStatus {
    /// The generation this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Counts per template, one entry per template name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<TemplateStatus>,
    /// One entry per claim of the target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimStatus>,
    /// [`RUNNING`], [`SUCCEEDED`], [`FAILED`] and [`PAUSED`], as metav1.Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `spec.recreateStatefulSet`: how far the StatefulSet's replacement is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreate: Option<RecreateStatus>,
}

/// The replacement of an apps/v1 StatefulSet by one whose templates say the new sizes. The
/// object to create is saved here before the old one is deleted, so that a restart between
/// the deletion and the creation loses nothing; while it is saved the migration holds
/// [`RECREATE_FINALIZER`], so that deleting the migration cannot lose it either.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecreateStatus {
    /// `Deleting` (the manifest is saved; the old object is deleted next, with orphan
    /// cascade), `Orphaned` (that deletion was accepted: the saved object is created once the
    /// old one is gone) or `Recreated`.
    #[serde(default)]
    pub phase: String,
    /// The uid of the StatefulSet being replaced: the deletion's precondition.
    #[serde(default, rename = "statefulSetUID")]
    pub stateful_set_uid: String,
    /// The resourceVersion of the StatefulSet the manifest was made from: the deletion's
    /// other precondition, so that an edit made after the save fails the deletion (409) and
    /// the manifest is saved again from the edited object instead of reverting it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stateful_set_resource_version: String,
    /// The StatefulSet to create in its place; dropped once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Value>,
}

/// [`RecreateStatus::phase`]: the manifest is saved; the old StatefulSet is deleted next, with
/// orphan cascade.
pub const RECREATE_DELETING: &str = "Deleting";
/// [`RecreateStatus::phase`]: kube-apiserver accepted the migration's deletion of the old
/// StatefulSet (orphan cascade): what makes it ours to create again. A StatefulSet that goes
/// any other way (a user's `kubectl delete`, `helm uninstall`) is not brought back.
pub const RECREATE_ORPHANED: &str = "Orphaned";
/// The finalizer a migration holds while its status holds a saved StatefulSet manifest
/// ([`RecreateStatus::manifest`]): deleting the migration then waits until the StatefulSet
/// exists again (or, if it was not deleted yet, until the re-create is called off).
pub const RECREATE_FINALIZER: &str = "storage.svm-apiserver.io/recreate-statefulset";
/// [`RecreateStatus::phase`]: the StatefulSet exists again with the new templates.
pub const RECREATE_DONE: &str = "Recreated";

/// The counts of one template's claims.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStatus {
    /// The volumeClaimTemplate's name.
    pub template_name: String,
    /// Claims whose resize was issued.
    #[serde(default)]
    pub compatible_replicas: i32,
    /// Claims resized.
    #[serde(default)]
    pub compatible_ready_replicas: i32,
}

/// One PersistentVolumeClaim's progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatus {
    /// The PersistentVolumeClaim's name.
    pub name: String,
    /// The volumeClaimTemplate it was made from.
    #[serde(default)]
    pub template: String,
    /// The ordinal of its pod.
    #[serde(default)]
    pub ordinal: i32,
    /// The storage the claim requests (`spec.resources.requests.storage`), a quantity.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub requested: String,
    /// Its capacity as last seen (`status.capacity.storage`), a quantity; empty until the claim
    /// reports one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub capacity: String,
    /// `Pending`, `Resizing`, `FileSystemResizePending`, `Resized`, `Failed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The last error seen for it; empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    /// The claim's uid when the controller first saw it: `OnDelete` resizes a claim only once
    /// its uid changed (deleted and re-created).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// When the current resize was issued (RFC 3339): `maxWaitTime` counts from here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resize_start_time: String,
    /// The uid of the pod deleted so that its file system is resized on restart: deleted
    /// once, never again for the same resize.
    #[serde(
        default,
        rename = "restartedPodUID",
        skip_serializing_if = "String::is_empty"
    )]
    pub restarted_pod_uid: String,
}

impl k8s_openapi::Resource for VolumeClaimMigration {
    const API_VERSION: &'static str = "storage.svm-apiserver.io/v1alpha1";
    const GROUP: &'static str = PROJECT.name;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "volumeclaimmigrations";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for VolumeClaimMigration {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

static INFO: ResourceInfo = ResourceInfo {
    group: PROJECT.name,
    kind: KIND,
    list_kind: "VolumeClaimMigrationList",
    plural: "volumeclaimmigrations",
    singular: "volumeclaimmigration",
    short_names: &["vcm"],
    categories: &[CATEGORY],
    versions: PROJECT.versions,
    storage_version: PROJECT.storage_version,
    namespaced: true,
    has_status_subresource: true,
};

/// How the generic store creates, updates, validates and prints VolumeClaimMigrations
/// (namespaced, with a `/status` subresource).
#[derive(Debug, Default, Clone, Copy)]
pub struct VolumeClaimMigrationStrategy;

/// A Kubernetes quantity in bytes (`resource.Quantity` for storage: a decimal number with an
/// optional binary `Ki..Ei`, decimal `k..E` or exponent `e<n>` suffix). `None` when it does
/// not parse; fractions of a byte round up, as upstream's `Value()`.
pub fn quantity_bytes(text: &str) -> Option<u128> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.is_empty() || number.starts_with('.') && number.len() == 1 {
        return None;
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (base, exponent): (u128, u32) = match suffix {
        "" => (10, 0),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        other => {
            let exponent = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))?;
            (10, exponent.parse().ok().filter(|e: &u32| *e <= 30)?)
        }
    };
    let multiplier = base.checked_pow(exponent)?;
    let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
    let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    let bytes = digits.checked_mul(multiplier)?;
    Some(bytes.div_ceil(scale))
}

impl VolumeClaimMigrationSpec {
    /// `spec.volumeClaimUpdateStrategy`, or [`ON_DELETE`] when unset.
    pub fn strategy(&self) -> &str {
        if self.volume_claim_update_strategy.is_empty() {
            ON_DELETE
        } else {
            &self.volume_claim_update_strategy
        }
    }

    /// Whether the target is an apps/v1 StatefulSet (immutable templates), not an Advanced one.
    pub fn is_apps_v1(&self) -> bool {
        self.target.api_version == "apps/v1"
    }
}

impl Strategy for VolumeClaimMigrationStrategy {
    type Object = VolumeClaimMigration;

    fn info(&self) -> &ResourceInfo {
        &INFO
    }

    fn decode(&self, version: &str, value: Value) -> ApiResult<VolumeClaimMigration> {
        check_version(&INFO, version)?;
        decode_body(KIND, version, value)
    }

    fn encode(&self, version: &str, obj: &VolumeClaimMigration) -> ApiResult<Value> {
        check_version(&INFO, version)?;
        encode_body_in(PROJECT.name, KIND, version, obj)
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        definitions(version)
    }

    fn definition_name(&self, version: &str) -> String {
        definition_name(version)
    }

    fn prepare_for_create(&self, obj: &mut VolumeClaimMigration) {
        obj.status = VolumeClaimMigrationStatus::default();
        default_spec(&mut obj.spec);
    }

    fn prepare_for_update(&self, new: &mut VolumeClaimMigration, old: &VolumeClaimMigration) {
        new.status = old.status.clone();
        default_spec(&mut new.spec);
    }

    fn prepare_for_status_update(
        &self,
        new: &mut VolumeClaimMigration,
        old: &VolumeClaimMigration,
    ) {
        new.spec = old.spec.clone();
    }

    fn validate(&self, obj: &VolumeClaimMigration) -> Vec<FieldError> {
        validate_spec(&obj.spec)
    }

    fn validate_update(
        &self,
        new: &VolumeClaimMigration,
        old: &VolumeClaimMigration,
    ) -> Vec<FieldError> {
        let mut errs = self.validate(new);
        if new.spec.target != old.spec.target {
            errs.push(FieldError::invalid(
                "spec.target",
                &serde_json::to_string(&new.spec.target).unwrap_or_default(),
                "field is immutable",
            ));
        }
        errs
    }

    fn validate_status_update(
        &self,
        new: &VolumeClaimMigration,
        _old: &VolumeClaimMigration,
    ) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, t) in new.status.templates.iter().enumerate() {
            let path = format!("status.templates[{i}]");
            if t.compatible_replicas < 0 || t.compatible_ready_replicas < 0 {
                errs.push(FieldError::invalid(
                    format!("{path}.compatibleReplicas"),
                    &t.compatible_replicas.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
            if t.compatible_ready_replicas > t.compatible_replicas {
                errs.push(FieldError::invalid(
                    format!("{path}.compatibleReadyReplicas"),
                    &t.compatible_ready_replicas.to_string(),
                    "must not exceed compatibleReplicas: a claim is resized only after its resize was issued",
                ));
            }
        }
        errs
    }

    fn spec_changed(&self, new: &VolumeClaimMigration, old: &VolumeClaimMigration) -> bool {
        new.spec != old.spec
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        let column = |name, type_, description| TableColumn {
            name,
            type_,
            format: "",
            description,
            priority: 0,
        };
        vec![
            name_column(),
            column(
                "Target",
                "string",
                "The StatefulSet whose claims are migrated.",
            ),
            column(
                "Templates",
                "string",
                "The size each template's claims must reach.",
            ),
            column(
                "Compatible",
                "integer",
                "Claims whose resize was issued, over all templates.",
            ),
            column("Ready", "integer", "Claims resized, over all templates."),
            column(
                "Status",
                "string",
                "Succeeded, Failed, Paused, Running, or Pending before the controller's first pass.",
            ),
            age_column(),
        ]
    }

    fn table_row(&self, obj: &VolumeClaimMigration) -> Vec<Value> {
        let templates: Vec<String> = obj
            .spec
            .templates
            .iter()
            .map(|t| format!("{}={}", t.name, t.storage))
            .collect();
        let templates = if templates.is_empty() {
            "<target's>".to_string()
        } else {
            templates.join(",")
        };
        let compatible: i32 = obj
            .status
            .templates
            .iter()
            .map(|t| t.compatible_replicas)
            .sum();
        let ready: i32 = obj
            .status
            .templates
            .iter()
            .map(|t| t.compatible_ready_replicas)
            .sum();
        vec![
            json!(obj.metadata.name.clone().unwrap_or_default()),
            json!(format!("{}/{}", obj.spec.target.kind, obj.spec.target.name)),
            json!(templates),
            json!(compatible),
            json!(ready),
            json!(phase(&obj.status)),
            json!(age(obj.metadata.creation_timestamp.as_ref())),
        ]
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.target.name"]
    }

    fn field_value(&self, obj: &VolumeClaimMigration, field: &str) -> Option<String> {
        (field == "spec.target.name").then(|| obj.spec.target.name.clone())
    }
}

/// The first true condition of Succeeded, Failed, Paused, Running; `Pending` when none is.
pub fn phase(status: &VolumeClaimMigrationStatus) -> &'static str {
    crate::rules::phase_of(&status.conditions, &[SUCCEEDED, FAILED, PAUSED, RUNNING])
}

fn default_spec(spec: &mut VolumeClaimMigrationSpec) {
    if spec.volume_claim_update_strategy.is_empty() {
        spec.volume_claim_update_strategy = ON_DELETE.into();
    }
    if spec.max_unavailable.is_none() {
        spec.max_unavailable = Some(1);
    }
    if spec.max_wait_time.is_empty() {
        spec.max_wait_time = DEFAULT_MAX_WAIT_TIME.into();
    }
}

fn validate_spec(spec: &VolumeClaimMigrationSpec) -> Vec<FieldError> {
    let mut errs = validate_target(&spec.target);
    let apps_v1 = spec.is_apps_v1();
    if apps_v1 && spec.templates.is_empty() {
        errs.push(FieldError::required(
            "spec.templates",
            "apps/v1 StatefulSets' volumeClaimTemplates are immutable: give the size of each template to migrate",
        ));
    }
    errs.extend(validate_templates(&spec.templates));
    errs.extend(validate_pace(spec));
    if spec.recreate_stateful_set && !apps_v1 && !spec.target.api_version.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.recreateStatefulSet",
            "only apps/v1 StatefulSets need re-creating: an Advanced StatefulSet's templates are mutable",
        ));
    }
    errs
}

/// Each template: a unique DNS label name and a positive quantity.
fn validate_templates(templates: &[TemplateSize]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = BTreeSet::new();
    for (i, template) in templates.iter().enumerate() {
        let path = format!("spec.templates[{i}]");
        if template.name.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else if !names.insert(template.name.as_str()) {
            errs.push(FieldError::duplicate(
                format!("{path}.name"),
                &template.name,
            ));
        } else {
            for msg in dns1123_label_errors(&template.name) {
                errs.push(FieldError::invalid(
                    format!("{path}.name"),
                    &template.name,
                    &msg,
                ));
            }
        }
        errs.extend(validate_storage(&path, &template.storage));
    }
    errs
}

/// A template's `storage`: a quantity greater than zero.
fn validate_storage(path: &str, storage: &str) -> Option<FieldError> {
    let field = format!("{path}.storage");
    match quantity_bytes(storage) {
        _ if storage.is_empty() => Some(FieldError::required(field, "")),
        None => Some(FieldError::invalid(
            field,
            storage,
            "must be a quantity such as 100Gi (quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$')",
        )),
        Some(0) => Some(FieldError::invalid(
            field,
            storage,
            "must be greater than zero",
        )),
        Some(_) => None,
    }
}

/// How the migration goes through the pods: its strategy, how many at once, how long it
/// waits for each.
fn validate_pace(spec: &VolumeClaimMigrationSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !STRATEGIES.contains(&spec.strategy()) {
        errs.push(FieldError::not_supported(
            "spec.volumeClaimUpdateStrategy",
            &spec.volume_claim_update_strategy,
            STRATEGIES,
        ));
    }
    errs.extend(crate::rules::at_least_one(
        "spec.maxUnavailable",
        spec.max_unavailable,
    ));
    errs.extend(crate::rules::positive_duration(
        "spec.maxWaitTime",
        &spec.max_wait_time,
        "60s or 5m",
    ));
    errs
}

fn validate_target(target: &Target) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if target.api_version.is_empty() {
        errs.push(FieldError::required("spec.target.apiVersion", ""));
    } else if !TARGET_API_VERSIONS.contains(&target.api_version.as_str()) {
        errs.push(FieldError::not_supported(
            "spec.target.apiVersion",
            &target.api_version,
            TARGET_API_VERSIONS,
        ));
    }
    if target.kind != TARGET_KIND {
        errs.push(FieldError::not_supported(
            "spec.target.kind",
            &target.kind,
            &[TARGET_KIND],
        ));
    }
    if target.name.is_empty() {
        errs.push(FieldError::required("spec.target.name", ""));
    } else {
        for msg in dns1123_subdomain_errors(&target.name) {
            errs.push(FieldError::invalid("spec.target.name", &target.name, &msg));
        }
    }
    errs
}

/// `io.svm-apiserver.storage.v1alpha1.VolumeClaimMigration`: the group's reversed domain, as
/// CRDs are named.
fn definition_name(version: &str) -> String {
    reversed_name(PROJECT.name, version, KIND)
}

fn definitions(version: &str) -> Vec<(String, Value)> {
    let name = definition_name(version);
    vec![
        (
            name.clone(),
            json!({
                "description": "VolumeClaimMigration brings the existing PersistentVolumeClaims of a StatefulSet up to the sizes of its volumeClaimTemplates, ordinal by ordinal, highest first. Only expansions where the StorageClass allows them; nothing is ever deleted.",
                "type": "object",
                "properties": {
                    "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
                    "kind": string("Kind is a string value representing the REST resource this object represents."),
                    "metadata": described_ref(&format!("{META}.ObjectMeta"), "Standard object metadata."),
                    "spec": described_ref(&format!("{name}Spec"), "What the claims must become, and how."),
                    "status": described_ref(&format!("{name}Status"), "How far the migration is."),
                },
                "x-kubernetes-group-version-kind": [{"group": PROJECT.name, "kind": KIND, "version": version}],
            }),
        ),
        (
            format!("{name}Spec"),
            json!({
                "description": "The StatefulSet, the sizes, and the rollout.",
                "type": "object",
                "required": ["target"],
                "properties": {
                    "target": described_ref(&format!("{name}Target"), "The StatefulSet (apps/v1, or apps.kruise.io/v1beta1 Advanced StatefulSet) in this namespace. Immutable."),
                    "templates": list_map(&format!("{name}TemplateSize"), "name", "The size each volumeClaimTemplate's claims must reach. Required for apps/v1; for an Advanced StatefulSet, empty means the target's own templates."),
                    "volumeClaimUpdateStrategy": string("OnDelete (default): a claim is brought up to date only when it is deleted and re-created. OnPodRollingUpdate: claims are expanded in place, each before its pod is rolled."),
                    "maxUnavailable": int32("How many pods may be unavailable at once during the rollout. Default 1."),
                    "maxWaitTime": string("How long an ambiguous failure (no clear error from the resizer) is retried before the claim is reported Failed. A Go duration; default 60s."),
                    "paused": {"type": "boolean", "description": "Stop issuing resizes until unset."},
                    "recreateStatefulSet": {"type": "boolean", "description": "apps/v1 only: when every claim is resized, re-create the StatefulSet with orphan cascade so that its volumeClaimTemplates say the new sizes. Pods and claims are kept."},
                },
            }),
        ),
        (
            format!("{name}Target"),
            json!({
                "description": "A StatefulSet in the migration's namespace.",
                "type": "object",
                "required": ["apiVersion", "kind", "name"],
                "properties": {
                    "apiVersion": string("apps/v1 or apps.kruise.io/v1beta1."),
                    "kind": string("StatefulSet."),
                    "name": string("The StatefulSet's name."),
                },
            }),
        ),
        (
            format!("{name}TemplateSize"),
            json!({
                "description": "The size one volumeClaimTemplate's claims must reach.",
                "type": "object",
                "required": ["name", "storage"],
                "properties": {
                    "name": {"type": "string", "default": "", "description": "The volumeClaimTemplate's name."},
                    "storage": {"type": "string", "default": "", "description": "The requested storage, a quantity such as 100Gi. Only increases are applied."},
                },
            }),
        ),
        (
            format!("{name}Status"),
            json!({
                "description": "How far a VolumeClaimMigration is. Done when observedGeneration equals metadata.generation and, for every template, compatibleReadyReplicas equals compatibleReplicas.",
                "type": "object",
                "properties": {
                    "observedGeneration": {"type": "integer", "format": "int64", "description": "The generation the status is about."},
                    "templates": list_map(&format!("{name}TemplateStatus"), "templateName", "Counts per template."),
                    "claims": list_map(&format!("{name}ClaimStatus"), "name", "One entry per claim."),
                    "conditions": {
                        "type": "array",
                        "description": "Running, Succeeded, Failed, Paused.",
                        "items": {"allOf": [reference(&format!("{META}.Condition"))], "default": {}},
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                    },
                    "recreate": {"allOf": [reference(&format!("{name}RecreateStatus"))], "description": "spec.recreateStatefulSet: how far the StatefulSet's replacement is."},
                },
            }),
        ),
        (
            format!("{name}RecreateStatus"),
            json!({
                "description": "The replacement of an apps/v1 StatefulSet by one whose volumeClaimTemplates say the new sizes (deleted with orphan cascade, created again from the saved manifest).",
                "type": "object",
                "properties": {
                    "phase": string("Deleting (the manifest saved), Orphaned (our orphan deletion of the old StatefulSet accepted: it is created again) or Recreated."),
                    "statefulSetUID": string("The uid of the StatefulSet being replaced."),
                    "statefulSetResourceVersion": string("The resourceVersion of the StatefulSet the manifest was made from: with the uid, the precondition of its deletion (an edit made since fails the deletion, and the manifest is saved again)."),
                    "manifest": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-embedded-resource": true, "description": "The StatefulSet to create in its place, saved before the old one is deleted."},
                },
            }),
        ),
        (
            format!("{name}TemplateStatus"),
            json!({
                "description": "Counts of one template's claims.",
                "type": "object",
                "required": ["templateName"],
                "properties": {
                    "templateName": {"type": "string", "default": "", "description": "The volumeClaimTemplate's name."},
                    "compatibleReplicas": int32("Claims whose resize was issued."),
                    "compatibleReadyReplicas": int32("Claims resized."),
                },
            }),
        ),
        (
            format!("{name}ClaimStatus"),
            json!({
                "description": "One claim's progress.",
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "default": "", "description": "The PersistentVolumeClaim's name."},
                    "template": string("The volumeClaimTemplate it was made from."),
                    "ordinal": int32("The ordinal of its pod."),
                    "requested": string("The storage requested of it."),
                    "capacity": string("Its capacity as last seen."),
                    "phase": string("Pending, Resizing, FileSystemResizePending, Resized or Failed."),
                    "lastError": string("The last error seen for it."),
                    "uid": string("The claim's uid when first seen (OnDelete resizes it once the uid changed)."),
                    "resizeStartTime": string("When the current resize was issued (RFC 3339); maxWaitTime counts from here."),
                    "restartedPodUID": string("The pod deleted so that the file system is resized on restart."),
                },
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(api_version: &str, templates: &[(&str, &str)]) -> VolumeClaimMigration {
        VolumeClaimMigration {
            spec: VolumeClaimMigrationSpec {
                target: Target {
                    api_version: api_version.into(),
                    kind: "StatefulSet".into(),
                    name: "web".into(),
                },
                templates: templates
                    .iter()
                    .map(|(name, storage)| TemplateSize {
                        name: (*name).into(),
                        storage: (*storage).into(),
                    })
                    .collect(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn quantities_parse_as_upstream_counts_bytes() {
        for (text, bytes) in [
            ("10Gi", 10u128 << 30),
            ("1.5Gi", 3 << 29),
            ("100G", 100_000_000_000),
            ("1e3", 1000),
            ("512", 512),
            ("0.5", 1),
        ] {
            assert_eq!(quantity_bytes(text), Some(bytes), "{text}");
        }
        for bad in ["", "Gi", "10Xi", "-1Gi", "1.2.3", "ten"] {
            assert_eq!(quantity_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_good_spec_passes_and_defaults_fill_in() {
        let s = VolumeClaimMigrationStrategy;
        let mut m = migration("apps/v1", &[("data", "100Gi"), ("logs", "20Gi")]);
        s.prepare_for_create(&mut m);
        assert!(s.validate(&m).is_empty(), "{:?}", s.validate(&m));
        assert_eq!(m.spec.volume_claim_update_strategy, ON_DELETE);
        assert_eq!(m.spec.max_unavailable, Some(1));
        assert_eq!(m.spec.max_wait_time, "60s");
    }

    #[test]
    fn bad_specs_name_every_defect() {
        let s = VolumeClaimMigrationStrategy;
        let mut m = migration("apps/v2", &[("data", "lots"), ("data", "1Gi"), ("", "0")]);
        m.spec.target.kind = "Deployment".into();
        m.spec.volume_claim_update_strategy = "Always".into();
        m.spec.max_unavailable = Some(0);
        m.spec.max_wait_time = "soon".into();
        assert_eq!(
            fields(&s.validate(&m)),
            vec![
                "spec.target.apiVersion",
                "spec.target.kind",
                "spec.templates[0].storage",
                "spec.templates[1].name",
                "spec.templates[2].name",
                "spec.templates[2].storage",
                "spec.volumeClaimUpdateStrategy",
                "spec.maxUnavailable",
                "spec.maxWaitTime",
            ]
        );
        // apps/v1 needs sizes; only apps/v1 is re-created.
        assert_eq!(
            fields(&s.validate(&migration("apps/v1", &[]))),
            vec!["spec.templates"]
        );
        let mut kruise = migration("apps.kruise.io/v1beta1", &[]);
        assert!(s.validate(&kruise).is_empty());
        kruise.spec.recreate_stateful_set = true;
        assert_eq!(
            fields(&s.validate(&kruise)),
            vec!["spec.recreateStatefulSet"]
        );
    }

    #[test]
    fn the_target_is_immutable_and_status_counts_are_consistent() {
        let s = VolumeClaimMigrationStrategy;
        let old = migration("apps/v1", &[("data", "10Gi")]);
        let mut new = old.clone();
        new.spec.target.name = "other".into();
        assert_eq!(fields(&s.validate_update(&new, &old)), vec!["spec.target"]);
        let mut status = old.clone();
        status.status.templates = vec![TemplateStatus {
            template_name: "data".into(),
            compatible_replicas: 1,
            compatible_ready_replicas: 2,
        }];
        assert_eq!(
            fields(&s.validate_status_update(&status, &old)),
            vec!["status.templates[0].compatibleReadyReplicas"]
        );
    }

    #[test]
    fn the_table_row_sums_templates_and_names_the_phase() {
        let s = VolumeClaimMigrationStrategy;
        let mut m = migration("apps/v1", &[("data", "100Gi"), ("logs", "20Gi")]);
        m.metadata.name = Some("grow".into());
        m.status.templates = vec![
            TemplateStatus {
                template_name: "data".into(),
                compatible_replicas: 3,
                compatible_ready_replicas: 2,
            },
            TemplateStatus {
                template_name: "logs".into(),
                compatible_replicas: 1,
                compatible_ready_replicas: 1,
            },
        ];
        let row = s.table_row(&m);
        assert_eq!(row.len(), s.table_columns().len());
        assert_eq!(row[1], "StatefulSet/web");
        assert_eq!(row[2], "data=100Gi,logs=20Gi");
        assert_eq!((row[3].clone(), row[4].clone()), (json!(4), json!(3)));
        assert_eq!(row[5], "Pending");
    }
}

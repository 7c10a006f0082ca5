//! DataPlaneRollout (`storage.svm-apiserver.io/v1alpha1`, namespaced, alpha): a storage data
//! plane — a DaemonSet of per-node engines with `updateStrategy: OnDelete` — upgraded one node
//! at a time, each node gated on every volume with a replica there keeping enough healthy
//! replicas on other nodes (the replica guards). Not served yet: `install` registers it, behind
//! `--enable-data-plane-rollouts`, once its controller (`svm-dataplane`) runs it (issue 39).
//! The model is Longhorn's V2 data engine live upgrade (one
//! rollout for the whole upgrade, a state per node), made generic: any engine whose replicas
//! are objects the cluster serves, with a field naming the node, one naming the volume, and a
//! field value or a condition saying healthy.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::columns::{age, age_column, name_column};
use super::served::{check_version, decode_body, encode_body_in};
use super::{CATEGORY, PROJECT};
use svm_registry::validation::{
    dns1123_label_errors, dns1123_subdomain_errors, label_value_errors, qualified_name_errors,
};
use svm_registry::{ApiResult, FieldError, ResourceInfo, Strategy, TableColumn};

mod schema;
#[cfg(test)]
mod tests;
mod types;

pub use types::*;

static INFO: ResourceInfo = ResourceInfo {
    group: PROJECT.name,
    kind: KIND,
    list_kind: "DataPlaneRolloutList",
    plural: "dataplanerollouts",
    singular: "dataplanerollout",
    short_names: &["dpr"],
    categories: &[CATEGORY],
    versions: PROJECT.versions,
    storage_version: PROJECT.storage_version,
    namespaced: true,
    has_status_subresource: true,
};

/// How the generic store creates, updates, validates and prints DataPlaneRollouts
/// (namespaced, with a `/status` subresource).
#[derive(Debug, Default, Clone, Copy)]
pub struct DataPlaneRolloutStrategy;

impl DataPlaneRolloutSpec {
    /// `spec.maxUnavailable`, 1 when unset.
    pub fn max_unavailable(&self) -> i32 {
        self.max_unavailable.unwrap_or(1)
    }
}

impl ReplicaGuard {
    /// `minHealthyElsewhere`, 1 when unset.
    pub fn min_healthy_elsewhere(&self) -> i32 {
        self.min_healthy_elsewhere.unwrap_or(1)
    }
}

impl Strategy for DataPlaneRolloutStrategy {
    type Object = DataPlaneRollout;

    fn info(&self) -> &ResourceInfo {
        &INFO
    }

    fn decode(&self, version: &str, value: Value) -> ApiResult<DataPlaneRollout> {
        check_version(&INFO, version)?;
        decode_body(KIND, version, value)
    }

    fn encode(&self, version: &str, obj: &DataPlaneRollout) -> ApiResult<Value> {
        check_version(&INFO, version)?;
        encode_body_in(PROJECT.name, KIND, version, obj)
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        schema::definitions(version)
    }

    fn definition_name(&self, version: &str) -> String {
        schema::definition_name(version)
    }

    fn prepare_for_create(&self, obj: &mut DataPlaneRollout) {
        obj.status = DataPlaneRolloutStatus::default();
        default_spec(&mut obj.spec);
    }

    fn prepare_for_update(&self, new: &mut DataPlaneRollout, old: &DataPlaneRollout) {
        new.status = old.status.clone();
        default_spec(&mut new.spec);
    }

    fn prepare_for_status_update(&self, new: &mut DataPlaneRollout, old: &DataPlaneRollout) {
        new.spec = old.spec.clone();
    }

    fn validate(&self, obj: &DataPlaneRollout) -> Vec<FieldError> {
        validate_spec(&obj.spec)
    }

    fn validate_update(&self, new: &DataPlaneRollout, old: &DataPlaneRollout) -> Vec<FieldError> {
        let mut errs = self.validate(new);
        if new.spec.daemon_set != old.spec.daemon_set {
            errs.push(FieldError::invalid(
                "spec.daemonSet",
                &new.spec.daemon_set,
                "field is immutable",
            ));
        }
        errs
    }

    fn validate_status_update(
        &self,
        new: &DataPlaneRollout,
        _old: &DataPlaneRollout,
    ) -> Vec<FieldError> {
        validate_status(&new.status)
    }

    fn spec_changed(&self, new: &DataPlaneRollout, old: &DataPlaneRollout) -> bool {
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
                "DaemonSet",
                "string",
                "The data-plane DaemonSet rolled out.",
            ),
            column(
                "Upgraded",
                "string",
                "Selected nodes running the newest revision, of all selected nodes.",
            ),
            column("Revision", "string", "The revision being rolled out."),
            column(
                "Status",
                "string",
                "Succeeded, Failed, Paused, Running, or Pending before the controller's first pass.",
            ),
            age_column(),
        ]
    }

    fn table_row(&self, obj: &DataPlaneRollout) -> Vec<Value> {
        vec![
            json!(obj.metadata.name.clone().unwrap_or_default()),
            json!(obj.spec.daemon_set),
            json!(format!(
                "{}/{}",
                obj.status.nodes_upgraded, obj.status.nodes_total
            )),
            json!(obj.status.revision),
            json!(phase(&obj.status)),
            json!(age(obj.metadata.creation_timestamp.as_ref())),
        ]
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.daemonSet"]
    }

    fn field_value(&self, obj: &DataPlaneRollout, field: &str) -> Option<String> {
        (field == "spec.daemonSet").then(|| obj.spec.daemon_set.clone())
    }
}

/// The first true condition of Succeeded, Failed, Paused, Running; `Pending` when none is.
pub fn phase(status: &DataPlaneRolloutStatus) -> &'static str {
    crate::rules::phase_of(&status.conditions, &[SUCCEEDED, FAILED, PAUSED, RUNNING])
}

fn default_spec(spec: &mut DataPlaneRolloutSpec) {
    if spec.max_unavailable.is_none() {
        spec.max_unavailable = Some(1);
    }
    if spec.wait_limit.is_empty() {
        spec.wait_limit = DEFAULT_WAIT_LIMIT.into();
    }
    for guard in &mut spec.replica_guards {
        if guard.min_healthy_elsewhere.is_none() {
            guard.min_healthy_elsewhere = Some(1);
        }
    }
}

fn validate_spec(spec: &DataPlaneRolloutSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.daemon_set.is_empty() {
        errs.push(FieldError::required("spec.daemonSet", ""));
    } else {
        for msg in dns1123_subdomain_errors(&spec.daemon_set) {
            errs.push(FieldError::invalid(
                "spec.daemonSet",
                &spec.daemon_set,
                &msg,
            ));
        }
    }
    errs.extend(validate_nodes(&spec.nodes));
    if let Some(selector) = &spec.node_selector {
        errs.extend(validate_selector("spec.nodeSelector", selector));
    }
    errs.extend(validate_pace(spec));
    if let Some(consumers) = &spec.consumers {
        errs.extend(validate_consumers(consumers));
    }
    let mut names = BTreeSet::new();
    for (i, guard) in spec.replica_guards.iter().enumerate() {
        let path = format!("spec.replicaGuards[{i}]");
        if !guard.name.is_empty() && !names.insert(guard.name.as_str()) {
            errs.push(FieldError::duplicate(format!("{path}.name"), &guard.name));
        }
        errs.extend(validate_guard(&path, guard));
    }
    errs
}

/// The explicit node list: Node names, each once.
fn validate_nodes(nodes: &[String]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, node) in nodes.iter().enumerate() {
        let path = format!("spec.nodes[{i}]");
        if !seen.insert(node.as_str()) {
            errs.push(FieldError::duplicate(path, node));
            continue;
        }
        for msg in dns1123_subdomain_errors(node) {
            errs.push(FieldError::invalid(path.clone(), node, &msg));
        }
    }
    errs
}

/// How many nodes at once, and how long an ambiguous wait may last.
fn validate_pace(spec: &DataPlaneRolloutSpec) -> Vec<FieldError> {
    let max = crate::rules::at_least_one("spec.maxUnavailable", spec.max_unavailable);
    let wait = crate::rules::positive_duration("spec.waitLimit", &spec.wait_limit, "10m or 1h");
    max.into_iter().chain(wait).collect()
}

fn validate_consumers(consumers: &ConsumerPods) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, namespace) in consumers.namespaces.iter().enumerate() {
        for msg in dns1123_label_errors(namespace) {
            errs.push(FieldError::invalid(
                format!("spec.consumers.namespaces[{i}]"),
                namespace,
                &msg,
            ));
        }
    }
    let selector = &consumers.selector;
    if selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
    {
        // An empty selector would evict every pod of the node's namespaces.
        errs.push(FieldError::required(
            "spec.consumers.selector",
            "an empty selector would select every pod: name the consumers' labels",
        ));
    }
    errs.extend(validate_selector("spec.consumers.selector", selector));
    errs
}

/// A metav1.LabelSelector as kube-apiserver validates one: qualified keys, label values, and
/// values only (and always) with `In`/`NotIn`.
fn validate_selector(path: &str, selector: &LabelSelector) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        for msg in qualified_name_errors(key) {
            errs.push(FieldError::invalid(
                format!("{path}.matchLabels"),
                key,
                &msg,
            ));
        }
        for msg in label_value_errors(value) {
            errs.push(FieldError::invalid(
                format!("{path}.matchLabels"),
                value,
                &msg,
            ));
        }
    }
    for (i, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        for msg in qualified_name_errors(&expression.key) {
            errs.push(FieldError::invalid(
                format!("{at}.key"),
                &expression.key,
                &msg,
            ));
        }
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(FieldError::not_supported(
                format!("{at}.operator"),
                other,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            )),
        }
    }
    errs
}

/// One guard: a named resource, dotted node and volume fields, one health rule, at least one
/// healthy replica elsewhere.
fn validate_guard(path: &str, guard: &ReplicaGuard) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if guard.name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    } else {
        for msg in dns1123_label_errors(&guard.name) {
            errs.push(FieldError::invalid(
                format!("{path}.name"),
                &guard.name,
                &msg,
            ));
        }
    }
    for (field, value) in [
        ("resource.version", &guard.resource.version),
        ("resource.resource", &guard.resource.resource),
    ] {
        if value.is_empty() {
            errs.push(FieldError::required(format!("{path}.{field}"), ""));
        }
    }
    for (field, value) in [
        ("nodeField", &guard.node_field),
        ("volumeField", &guard.volume_field),
    ] {
        errs.extend(validate_field_path(&format!("{path}.{field}"), value));
    }
    errs.extend(validate_health(&format!("{path}.healthy"), &guard.healthy));
    if let Some(min) = guard.min_healthy_elsewhere.filter(|m| *m < 1) {
        errs.push(FieldError::invalid(
            format!("{path}.minHealthyElsewhere"),
            &min.to_string(),
            "must be greater than or equal to 1: a node whose volumes may keep no healthy replica elsewhere needs no guard",
        ));
    }
    errs
}

/// `field` or `field` + `value`, or `condition`: exactly one rule.
fn validate_health(path: &str, healthy: &HealthRule) -> Vec<FieldError> {
    let by_field = !healthy.field.is_empty() || !healthy.value.is_empty();
    let by_condition = !healthy.condition.is_empty();
    match (by_field, by_condition) {
        (true, true) => vec![FieldError::forbidden(
            path,
            "give either field and value, or condition, not both",
        )],
        (false, false) => vec![FieldError::required(
            path,
            "give field and value (e.g. status.currentState = running), or a condition type (e.g. Ready)",
        )],
        (true, false) if healthy.value.is_empty() => {
            vec![FieldError::required(format!("{path}.value"), "")]
        }
        (true, false) => validate_field_path(&format!("{path}.field"), &healthy.field),
        (false, true) => qualified_name_errors(&healthy.condition)
            .into_iter()
            .map(|msg| FieldError::invalid(format!("{path}.condition"), &healthy.condition, &msg))
            .collect(),
    }
}

/// A dotted field path of an object (`spec.nodeID`): segments of letters, digits, `_` and `-`.
fn validate_field_path(path: &str, value: &str) -> Vec<FieldError> {
    if value.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let valid = value.split('.').all(|segment| {
        !segment.is_empty()
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    if valid {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            path,
            value,
            "must be a dotted field path such as spec.nodeID",
        )]
    }
}

/// Counts that add up, one entry per node, known phases.
fn validate_status(status: &DataPlaneRolloutStatus) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if status.nodes_total < 0 {
        errs.push(FieldError::invalid(
            "status.nodesTotal",
            &status.nodes_total.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    if status.nodes_upgraded < 0 || status.nodes_upgraded > status.nodes_total {
        errs.push(FieldError::invalid(
            "status.nodesUpgraded",
            &status.nodes_upgraded.to_string(),
            "must be between 0 and nodesTotal",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, node) in status.nodes.iter().enumerate() {
        let path = format!("status.nodes[{i}]");
        if !seen.insert(node.name.as_str()) {
            errs.push(FieldError::duplicate(format!("{path}.name"), &node.name));
        }
        if !node.phase.is_empty() && !phases::ALL.contains(&node.phase.as_str()) {
            errs.push(FieldError::not_supported(
                format!("{path}.phase"),
                &node.phase,
                phases::ALL,
            ));
        }
    }
    errs
}

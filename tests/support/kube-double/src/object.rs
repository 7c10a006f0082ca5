//! Object metadata helpers: system fields, name rules, generateName, generation and
//! managedFields bookkeeping.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use serde_json::{Map, Value, json};

use crate::status::Cause;

/// metav1.Time as kube-apiserver writes it (RFC 3339, whole seconds, `Z`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// metav1.MicroTime (lease renewTime).
pub fn now_rfc3339_micros() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

pub fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata").and_then(Value::as_object)
}

/// The metadata map, created (and a non-object replaced) if needed.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = object.as_object_mut().expect("made an object above");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("made an object above")
}

pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    metadata(object)?.get(field)?.as_str()
}

pub fn name_of(object: &Value) -> &str {
    meta_str(object, "name").unwrap_or("")
}

pub fn set_meta(object: &mut Value, field: &str, value: Value) {
    metadata_mut(object).insert(field.to_string(), value);
}

pub fn remove_meta(object: &mut Value, field: &str) {
    metadata_mut(object).remove(field);
}

/// The letters `names.SimpleNameGenerator` draws from (no vowels, no confusable digits).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` plus 5 random characters (recording 17b).
pub fn generate_name(prefix: &str) -> String {
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    // Names may be at most 253 characters; upstream trims the prefix to fit 63 - 5.
    let mut keep = prefix.len().min(58);
    while !prefix.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &prefix[..keep])
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `IsDNS1123Subdomain`: the rule for most object names.
pub fn validate_subdomain(field: &str, value: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if value.len() > 253 {
        causes.push(Cause::invalid(
            field,
            value,
            "must be no more than 253 characters",
        ));
    }
    if !value.split('.').all(is_dns_label) {
        causes.push(Cause::invalid(field, value, DNS1123_SUBDOMAIN_MSG));
    }
    causes
}

/// `IsDNS1123Label`: the rule for namespace names.
pub fn validate_label(field: &str, value: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if value.len() > 63 {
        causes.push(Cause::invalid(
            field,
            value,
            "must be no more than 63 characters",
        ));
    }
    if !is_dns_label(&value[..value.len().min(63)]) || value.is_empty() {
        causes.push(Cause::invalid(field, value, DNS1123_LABEL_MSG));
    }
    causes
}

/// `IsConfigMapKey` (ConfigMap data and Secret data keys, recording 16a).
pub fn validate_config_key(field: &str, key: &str) -> Vec<Cause> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Vec::new()
    } else {
        vec![Cause::invalid(
            field,
            key,
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        )]
    }
}

/// The object without metadata and status: what a spec change (and so a generation bump) is
/// measured on.
fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        for key in ["metadata", "status", "apiVersion", "kind"] {
            map.remove(key);
        }
    }
    copy
}

/// Bumps metadata.generation when anything but metadata and status changed (the strategies
/// of types that track generation: CRs, Deployments, CRDs).
pub fn bump_generation(old: &Value, new: &mut Value) {
    let old_generation = metadata(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let generation = if spec_part(old) != spec_part(new) {
        old_generation + 1
    } else {
        old_generation
    };
    set_meta(new, "generation", json!(generation));
}

// ---------------------------------------------------------------------------------------
// managedFields
// ---------------------------------------------------------------------------------------

/// Metadata fields the server owns; never tracked in managedFields.
const SYSTEM_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

type FieldPath = Vec<String>;
type FieldSet = BTreeSet<FieldPath>;

/// Whose fields changed, and how, for one write.
pub struct ManagerWrite<'a> {
    pub manager: &'a str,
    /// `Update` or `Apply`.
    pub operation: &'a str,
    /// The group/version of the request.
    pub api_version: &'a str,
    /// `Some("status")` for writes through /status.
    pub subresource: Option<&'a str>,
    /// For `Apply`: the applied configuration (its fields become the manager's set).
    pub applied: Option<&'a Value>,
    /// A built-in (typed) kind: its top-level `spec` and `status` are Go structs that always
    /// exist, so nobody owns them themselves (no `"."` entry, recordings 15a/15b), unlike
    /// the maps of a custom resource (recording 04b).
    pub typed: bool,
}

/// Recomputes `new`'s managedFields from `old`'s after a write, the way the field manager
/// does for the cases that matter here: an unchanged object keeps its managedFields (so a no-op
/// write stays byte-identical, recording 08); changed fields move to the writing manager and
/// leave every other manager (recording 09b); removed fields leave everyone. Lists are
/// tracked as atomic (`f:<list>`), not per element.
pub fn update_managed_fields(old: Option<&Value>, new: &mut Value, write: &ManagerWrite<'_>) {
    let old_entries: Vec<Value> = old
        .and_then(metadata)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();

    let mut changed = FieldSet::new();
    collect_changed(
        old.unwrap_or(&Value::Null),
        new,
        &mut Vec::new(),
        &mut changed,
        Level::Top { typed: write.typed },
    );
    let applied: Option<FieldSet> = write.applied.map(|a| {
        let mut set = FieldSet::new();
        let level = Level::Top { typed: write.typed };
        collect_changed(&Value::Null, a, &mut Vec::new(), &mut set, level);
        set
    });

    if changed.is_empty() && applied.as_ref().is_none_or(|a| a.is_empty()) {
        if old_entries.is_empty() {
            remove_meta(new, "managedFields");
        } else {
            set_meta(new, "managedFields", Value::Array(old_entries));
        }
        return;
    }

    let now = now_rfc3339();
    let mut entries: Vec<(Value, FieldSet)> = old_entries
        .into_iter()
        .map(|e| {
            let set = e.get("fieldsV1").map(fields_v1_to_set).unwrap_or_default();
            (e, set)
        })
        .collect();

    let is_mine = |e: &Value| {
        e["manager"] == write.manager
            && e["operation"] == write.operation
            && e.get("subresource").and_then(Value::as_str) == write.subresource
    };

    let taken: FieldSet = match &applied {
        Some(a) => a.union(&changed).cloned().collect(),
        None => changed.clone(),
    };
    for (entry, set) in entries.iter_mut() {
        if !is_mine(entry) {
            set.retain(|p| !taken.contains(p));
        }
    }

    let mine = entries.iter().position(|(e, _)| is_mine(e));
    let my_set: FieldSet = match (&applied, mine) {
        (Some(a), _) => a.clone(),
        (None, Some(i)) => entries[i].1.union(&changed).cloned().collect(),
        (None, None) => changed.clone(),
    };
    let my_entry_changed = mine.is_none_or(|i| entries[i].1 != my_set);
    match mine {
        Some(i) => {
            entries[i].1 = my_set;
            if my_entry_changed {
                entries[i].0["time"] = json!(now);
                entries[i].0["apiVersion"] = json!(write.api_version);
            }
        }
        None => {
            let mut entry = json!({
                "manager": write.manager,
                "operation": write.operation,
                "apiVersion": write.api_version,
                "time": now,
                "fieldsType": "FieldsV1",
            });
            if let Some(sub) = write.subresource {
                entry["subresource"] = json!(sub);
            }
            entries.push((entry, my_set));
        }
    }

    let mut out: Vec<Value> = Vec::new();
    for (mut entry, mut set) in entries {
        set.retain(|p| path_exists(new, p));
        if set.is_empty() {
            continue;
        }
        entry["fieldsV1"] = set_to_fields_v1(&set);
        out.push(entry);
    }
    out.sort_by(|a, b| {
        let key = |e: &Value| {
            (
                e["operation"].as_str().unwrap_or("").to_string(),
                e["time"].as_str().unwrap_or("").to_string(),
                e["manager"].as_str().unwrap_or("").to_string(),
                e["apiVersion"].as_str().unwrap_or("").to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    if out.is_empty() {
        remove_meta(new, "managedFields");
    } else {
        set_meta(new, "managedFields", Value::Array(out));
    }
}

/// Where in the object `collect_changed` is.
#[derive(Clone, Copy)]
enum Level {
    Top { typed: bool },
    Metadata,
    Nested,
}

/// Paths in `new` that are absent from or different in `old`. A map that did not exist
/// before is owned itself (the `"."` entry) and so are all its fields; metadata (and a typed
/// kind's spec and status) always exist and are never owned themselves.
fn collect_changed(
    old: &Value,
    new: &Value,
    prefix: &mut FieldPath,
    out: &mut FieldSet,
    level: Level,
) {
    let Some(new_map) = new.as_object() else {
        return;
    };
    let old_map = old.as_object();
    for (key, new_value) in new_map {
        let always_present = match level {
            Level::Top { typed } => {
                if matches!(key.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                key == "metadata" || (typed && (key == "spec" || key == "status"))
            }
            Level::Metadata => {
                if SYSTEM_METADATA.contains(&key.as_str()) {
                    continue;
                }
                false
            }
            Level::Nested => false,
        };
        let old_value = old_map.and_then(|m| m.get(key));
        if old_value == Some(new_value) {
            continue;
        }
        let child_level = if matches!(level, Level::Top { .. }) && key == "metadata" {
            Level::Metadata
        } else {
            Level::Nested
        };
        prefix.push(format!("f:{key}"));
        match (old_value, new_value) {
            (_, Value::Object(_)) if always_present => {
                collect_changed(
                    old_value.unwrap_or(&Value::Null),
                    new_value,
                    prefix,
                    out,
                    child_level,
                );
            }
            (Some(Value::Object(_)), Value::Object(_)) => {
                collect_changed(
                    old_value.unwrap_or(&Value::Null),
                    new_value,
                    prefix,
                    out,
                    child_level,
                );
            }
            (_, Value::Object(m)) if !m.is_empty() => {
                out.insert(prefix.clone());
                collect_changed(&Value::Null, new_value, prefix, out, child_level);
            }
            _ => {
                out.insert(prefix.clone());
            }
        }
        prefix.pop();
    }
}

fn path_exists(object: &Value, path: &FieldPath) -> bool {
    let mut cur = object;
    for segment in path {
        let Some(key) = segment.strip_prefix("f:") else {
            return false;
        };
        match cur.get(key) {
            Some(v) => cur = v,
            None => return false,
        }
    }
    true
}

fn fields_v1_to_set(fields: &Value) -> FieldSet {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
        let Some(map) = v.as_object() else {
            return;
        };
        if map.is_empty() && !prefix.is_empty() {
            out.insert(prefix.clone());
            return;
        }
        for (k, child) in map {
            if k == "." {
                out.insert(prefix.clone());
            } else {
                prefix.push(k.clone());
                walk(child, prefix, out);
                prefix.pop();
            }
        }
    }
    let mut out = FieldSet::new();
    walk(fields, &mut Vec::new(), &mut out);
    out
}

#[derive(Default)]
struct Node {
    own: bool,
    children: BTreeMap<String, Node>,
}

fn set_to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for segment in path {
            node = node.children.entry(segment.clone()).or_default();
        }
        node.own = true;
    }
    fn render(node: &Node) -> Value {
        let mut map = Map::new();
        if node.own && !node.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, child) in &node.children {
            map.insert(k.clone(), render(child));
        }
        Value::Object(map)
    }
    render(&root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write<'a>(manager: &'a str) -> ManagerWrite<'a> {
        ManagerWrite {
            manager,
            operation: "Update",
            api_version: "v1",
            subresource: None,
            applied: None,
            typed: false,
        }
    }

    #[test]
    fn create_owns_every_field_with_dot_entries_for_new_maps() {
        let mut obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "generateName": "gen-", "uid": "u"},
            "data": {"k": "v"}
        });
        update_managed_fields(None, &mut obj, &write("kube-recorder"));
        let mf = &obj["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "kube-recorder");
        assert_eq!(
            mf["fieldsV1"],
            json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:generateName": {}}})
        );
    }

    #[test]
    fn an_unchanged_object_keeps_its_managed_fields() {
        let mut old = json!({"metadata": {"name": "x"}, "spec": {"size": 1}});
        update_managed_fields(None, &mut old, &write("a"));
        let mut new = old.clone();
        update_managed_fields(Some(&old), &mut new, &write("b"));
        assert_eq!(old, new);
    }

    #[test]
    fn changed_fields_move_to_the_writer() {
        let mut old = json!({"metadata": {"name": "x"}, "spec": {"size": 1, "color": "blue"}});
        update_managed_fields(None, &mut old, &write("kubectl"));
        let mut new = old.clone();
        new["spec"]["size"] = json!(2);
        update_managed_fields(Some(&old), &mut new, &write("kube-recorder"));
        let mf = new["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 2);
        let kubectl = mf.iter().find(|e| e["manager"] == "kubectl").unwrap();
        assert_eq!(
            kubectl["fieldsV1"],
            json!({"f:spec": {".": {}, "f:color": {}}})
        );
        let recorder = mf.iter().find(|e| e["manager"] == "kube-recorder").unwrap();
        assert_eq!(recorder["fieldsV1"], json!({"f:spec": {"f:size": {}}}));
    }

    #[test]
    fn typed_kinds_do_not_own_spec_itself() {
        let mut review = json!({"metadata": {}, "spec": {"token": "t"}});
        update_managed_fields(
            None,
            &mut review,
            &ManagerWrite {
                typed: true,
                ..write("kube-recorder")
            },
        );
        assert_eq!(
            review["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:token": {}}})
        );
    }

    #[test]
    fn name_rules() {
        assert!(validate_subdomain("metadata.name", "a.b-c").is_empty());
        assert_eq!(validate_subdomain("metadata.name", "Bad_Name!").len(), 1);
        assert!(validate_label("metadata.name", "demo").is_empty());
        assert!(!validate_label("metadata.name", "a.b").is_empty());
        assert!(!validate_config_key("data[bad key]", "bad key").is_empty());
        let generated = generate_name("gen-");
        assert_eq!(generated.len(), 9);
        assert!(generated.starts_with("gen-"));
    }

    #[test]
    fn generation_moves_only_with_the_spec() {
        let old = json!({"metadata": {"generation": 3}, "spec": {"a": 1}, "status": {"x": 1}});
        let mut same =
            json!({"metadata": {"labels": {"l": "1"}}, "spec": {"a": 1}, "status": {"x": 2}});
        bump_generation(&old, &mut same);
        assert_eq!(same["metadata"]["generation"], 3);
        let mut changed = json!({"metadata": {}, "spec": {"a": 2}});
        bump_generation(&old, &mut changed);
        assert_eq!(changed["metadata"]["generation"], 4);
    }
}

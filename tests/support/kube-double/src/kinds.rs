//! Per-kind rules (the `strategy.go` of each type): what a create or update resets, how
//! bodies must be typed, and what validation refuses.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::crd;
use crate::object::{self, metadata, validate_config_key, validate_label, validate_subdomain};
use crate::resources::{Flavor, ResourceDef};
use crate::status::{ApiResult, Cause, StatusError};

/// The Go type name the decode errors of recording 16b mention (`ConfigMap.data`).
fn decode_error(def: &ResourceDef, version: &str, detail: &str) -> StatusError {
    StatusError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {detail}",
        kind = def.kind
    ))
}

fn string_map(
    def: &ResourceDef,
    version: &str,
    object: &Value,
    path: &[&str],
    go_field: &str,
) -> ApiResult<()> {
    let mut cur = object;
    for p in path {
        match cur.get(p) {
            Some(v) => cur = v,
            None => return Ok(()),
        }
    }
    match cur {
        Value::Null => Ok(()),
        Value::Object(map) => {
            for value in map.values() {
                if !value.is_string() && !value.is_null() {
                    return Err(decode_error(
                        def,
                        version,
                        &format!(
                            "json: cannot unmarshal {} into Go struct field {go_field} of type string",
                            json_type(value)
                        ),
                    ));
                }
            }
            Ok(())
        }
        other => Err(decode_error(
            def,
            version,
            &format!(
                "json: cannot unmarshal {} into Go struct field {go_field} of type map[string]string",
                json_type(other)
            ),
        )),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The typed-decoding checks kube-apiserver's JSON decoder performs for built-in kinds
/// (recording 16b: a non-string ConfigMap value is a 400, not a 422).
pub fn check_types(def: &ResourceDef, version: &str, object: &Value) -> ApiResult<()> {
    if !object.is_object() {
        return Err(StatusError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: expected an object",
            def.kind
        )));
    }
    if let Some(meta) = object.get("metadata")
        && !meta.is_object()
        && !meta.is_null()
    {
        return Err(decode_error(
            def,
            version,
            &format!(
                "json: cannot unmarshal {} into Go struct field {}.metadata of type v1.ObjectMeta",
                json_type(meta),
                def.kind
            ),
        ));
    }
    string_map(
        def,
        version,
        object,
        &["metadata", "labels"],
        &format!("{}.metadata.labels", def.kind),
    )?;
    string_map(
        def,
        version,
        object,
        &["metadata", "annotations"],
        &format!("{}.metadata.annotations", def.kind),
    )?;
    match def.flavor {
        Flavor::ConfigMap => {
            string_map(def, version, object, &["data"], "ConfigMap.data")?;
            string_map(
                def,
                version,
                object,
                &["binaryData"],
                "ConfigMap.binaryData",
            )?;
            check_base64_values(def, version, object, "binaryData")?;
        }
        Flavor::Secret => {
            string_map(def, version, object, &["data"], "Secret.data")?;
            string_map(def, version, object, &["stringData"], "Secret.stringData")?;
            check_base64_values(def, version, object, "data")?;
        }
        _ => {}
    }
    Ok(())
}

fn check_base64_values(
    def: &ResourceDef,
    version: &str,
    object: &Value,
    field: &str,
) -> ApiResult<()> {
    if let Some(map) = object.get(field).and_then(Value::as_object) {
        for value in map.values().filter_map(Value::as_str) {
            if let Err(e) = base64::engine::general_purpose::STANDARD.decode(value) {
                return Err(decode_error(
                    def,
                    version,
                    &format!("illegal base64 data: {e}"),
                ));
            }
        }
    }
    Ok(())
}

/// `PrepareForCreate`: what the server resets or fills on a new object.
pub fn prepare_for_create(def: &ResourceDef, object: &mut Value) {
    match def.flavor {
        Flavor::Secret => {
            fold_string_data(object);
            if object.get("type").is_none_or(Value::is_null) {
                object["type"] = json!("Opaque");
            }
        }
        Flavor::Namespace => {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
        }
        Flavor::CustomResourceDefinition => crd::prepare_for_create(object),
        Flavor::Deployment | Flavor::Custom if def.has_status() => {
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        _ => {}
    }
    if def.tracks_generation {
        object::set_meta(object, "generation", json!(1));
    }
}

/// Secrets: `stringData` is write-only and lands in `data`, base64-encoded.
fn fold_string_data(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (k, v) in string_data {
        if let (Some(s), Some(d)) = (v.as_str(), data.as_object_mut()) {
            d.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(s)),
            );
        }
    }
}

/// `PrepareForUpdate` of the main resource or of `/status`.
pub fn prepare_for_update(
    def: &ResourceDef,
    old: &Value,
    new: &mut Value,
    subresource: Option<&str>,
) {
    match subresource {
        Some("status") => {
            // Only status may change through /status: everything else comes from the old object.
            let status = new.get("status").cloned();
            let mut merged = old.clone();
            if let Some(map) = merged.as_object_mut() {
                match status {
                    Some(s) => {
                        map.insert("status".into(), s);
                    }
                    None => {
                        map.remove("status");
                    }
                }
            }
            *new = merged;
            if def.flavor == Flavor::CustomResourceDefinition {
                crd::prepare_for_status_update(new);
            }
        }
        _ => {
            if def.flavor == Flavor::Secret {
                fold_string_data(new);
            }
            if def.has_status()
                && let Some(map) = new.as_object_mut()
            {
                // The main resource cannot change status (status strategies own it).
                match old.get("status") {
                    Some(s) => {
                        map.insert("status".into(), s.clone());
                    }
                    None => {
                        map.remove("status");
                    }
                }
            }
            if def.flavor == Flavor::CustomResourceDefinition {
                crd::prepare_for_update(old, new);
            }
            if def.tracks_generation {
                object::bump_generation(old, new);
            }
        }
    }
}

/// `Validate` / `ValidateUpdate`: 422 causes.
pub fn validate(def: &ResourceDef, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = object::name_of(object);
    if old.is_none() {
        if name.is_empty() {
            causes.push(Cause::required(
                "metadata.name",
                "name or generateName is required",
            ));
        } else if def.flavor == Flavor::Namespace {
            causes.extend(validate_label("metadata.name", name));
        } else {
            causes.extend(validate_subdomain("metadata.name", name));
        }
    }
    if let Some(old) = old {
        let old_uid = object::meta_str(old, "uid").unwrap_or("");
        let new_uid = object::meta_str(object, "uid").unwrap_or("");
        if old_uid != new_uid {
            // Listed twice, as kube-apiserver does: once by the common-field check and once
            // by ValidateObjectMetaUpdate (recording 09b).
            let cause = Cause::invalid("metadata.uid", new_uid, "field is immutable");
            causes.push(cause.clone());
            causes.push(cause);
        }
    }
    match def.flavor {
        Flavor::ConfigMap | Flavor::Secret => {
            for field in ["data", "binaryData"] {
                if let Some(map) = object.get(field).and_then(Value::as_object) {
                    for key in map.keys() {
                        causes.extend(validate_config_key(&format!("{field}[{key}]"), key));
                    }
                }
            }
            let size: usize = ["data", "binaryData"]
                .iter()
                .filter_map(|f| object.get(*f).and_then(Value::as_object))
                .flat_map(|m| m.iter())
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum();
            if size > 1024 * 1024 {
                causes.push(Cause {
                    reason: "FieldValueTooLong",
                    field: String::new(),
                    message: format!("Too long: may not be more than {} bytes", 1024 * 1024),
                });
            }
        }
        Flavor::CustomResourceDefinition => causes.extend(crd::validate(object, old)),
        Flavor::StorageVersion if old.is_none() && !name.contains('.') => {
            causes.push(Cause::invalid(
                "metadata.name",
                name,
                "name must be in the form of <group>.<resource>",
            ));
        }
        _ => {}
    }
    if let Some(labels) = metadata(object)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        for (k, v) in labels {
            let value = v.as_str().unwrap_or("");
            if value.len() > 63 {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    value,
                    "must be no more than 63 characters",
                ));
            }
            if k.is_empty() {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    k,
                    "name part must be non-empty",
                ));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    fn def(plural: &str) -> ResourceDef {
        builtin_resources()
            .into_iter()
            .find(|d| d.plural == plural)
            .unwrap()
    }

    #[test]
    fn configmap_values_must_be_strings() {
        let err = check_types(&def("configmaps"), "v1", &json!({"data": {"k": 1}})).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        );
    }

    #[test]
    fn secrets_fold_string_data() {
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"a": "hi"}});
        prepare_for_create(&def("secrets"), &mut s);
        assert_eq!(s["data"]["a"], "aGk=");
        assert_eq!(s["type"], "Opaque");
        assert!(s.get("stringData").is_none());
    }

    #[test]
    fn status_survives_main_updates_and_only_status_changes_via_status() {
        let d = def("deployments");
        let old =
            json!({"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {"ready": 1}});
        let mut new = json!({"metadata": {}, "spec": {"replicas": 2}, "status": {"ready": 9}});
        prepare_for_update(&d, &old, &mut new, None);
        assert_eq!(new["status"]["ready"], 1);
        assert_eq!(new["metadata"]["generation"], 2);
        let mut via_status =
            json!({"metadata": {}, "spec": {"replicas": 5}, "status": {"ready": 3}});
        prepare_for_update(&d, &old, &mut via_status, Some("status"));
        assert_eq!(via_status["spec"]["replicas"], 1);
        assert_eq!(via_status["status"]["ready"], 3);
    }

    #[test]
    fn invalid_names_and_keys_are_422_causes() {
        let causes = validate(
            &def("configmaps"),
            &json!({"metadata": {"name": "Bad_Name!"}, "data": {"k": "v", "bad key": "x"}}),
            None,
        );
        let fields: Vec<_> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["metadata.name", "data[bad key]"]);
    }
}

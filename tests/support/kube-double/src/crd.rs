//! CustomResourceDefinitions: the apiextensions strategy (names, conditions, the append-only
//! `status.storedVersions` of recording 11) and the resource a CRD makes the double serve.

use serde_json::{Value, json};

use crate::object;
use crate::resources::{
    CUSTOM_RESOURCE_VERBS, Flavor, ResourceDef, SubresourceDef, compare_versions,
};
use crate::status::Cause;

/// The version marked `storage: true`, if exactly one is.
pub fn storage_version(crd: &Value) -> Option<String> {
    let versions = crd["spec"]["versions"].as_array()?;
    let mut storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .filter_map(|v| v["name"].as_str());
    let first = storage.next()?;
    if storage.next().is_some() {
        return None;
    }
    Some(first.to_string())
}

fn default_names(crd: &mut Value) {
    // Only a well-formed spec.names gets defaults; validation reports anything else.
    let Some(names) = crd
        .get_mut("spec")
        .and_then(|spec| spec.get_mut("names"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind.is_empty() {
        return;
    }
    let missing = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
    if missing(names.get("listKind")) {
        names.insert("listKind".into(), json!(format!("{kind}List")));
    }
    if missing(names.get("singular")) {
        names.insert("singular".into(), json!(kind.to_lowercase()));
    }
}

fn append_stored_version(crd: &mut Value) {
    let Some(storage) = storage_version(crd) else {
        return;
    };
    let status = &mut crd["status"];
    if !status.is_object() {
        *status = json!({});
    }
    let stored = &mut status["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut()
        && !list.iter().any(|v| v.as_str() == Some(storage.as_str()))
    {
        list.push(json!(storage));
    }
}

/// The status the apiextensions controllers settle on right after a create: names accepted,
/// established, storedVersions = [storage version] (recording 11, step 1).
pub fn prepare_for_create(crd: &mut Value) {
    default_names(crd);
    let now = object::now_rfc3339();
    crd["status"] = json!({
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "NoConflicts",
                "message": "no conflicts found"
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted"
            }
        ],
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": []
    });
    append_stored_version(crd);
}

/// A spec update keeps the status but appends a new storage version to storedVersions
/// (recording 11, step 2: the PATCH response already lists [v1, v2]).
pub fn prepare_for_update(_old: &Value, new: &mut Value) {
    default_names(new);
    append_stored_version(new);
}

/// Through /status the client may narrow storedVersions (what a finished migration does).
pub fn prepare_for_status_update(_new: &mut Value) {}

/// The subset of CRD validation the double enforces.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    let name = object::name_of(crd);
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural", ""));
    }
    if spec["names"]["kind"].as_str().is_none_or(str::is_empty) {
        causes.push(Cause::required("spec.names.kind", ""));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        other => causes.push(Cause::not_supported(
            "spec.scope",
            &crate::status::go_quote(other.unwrap_or("")),
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid(
            "spec.versions",
            "null",
            "must have exactly one version marked as storage version",
        ));
    } else if storage_version(crd).is_none() {
        causes.push(Cause::invalid(
            "spec.versions",
            "",
            "must have exactly one version marked as storage version",
        ));
    }
    let declared: Vec<&str> = versions.iter().filter_map(|v| v["name"].as_str()).collect();
    if let Some(stored) = crd["status"]["storedVersions"].as_array() {
        for (i, v) in stored.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            if !declared.contains(&v) {
                causes.push(Cause::invalid(
                    format!("status.storedVersions[{i}]"),
                    v,
                    "must appear in spec.versions",
                ));
            }
        }
        if let Some(storage) = storage_version(crd)
            && !stored.iter().any(|v| v.as_str() == Some(storage.as_str()))
        {
            causes.push(Cause::invalid(
                "status.storedVersions",
                &stored
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
                &format!("must have the storage version {storage}"),
            ));
        }
    }
    if let Some(old) = old {
        for field in ["group", "scope"] {
            if old["spec"][field] != spec[field] {
                causes.push(Cause::invalid(
                    format!("spec.{field}"),
                    spec[field].as_str().unwrap_or(""),
                    "field is immutable",
                ));
            }
        }
        if old["spec"]["names"]["plural"] != spec["names"]["plural"] {
            causes.push(Cause::invalid(
                "spec.names.plural",
                plural,
                "field is immutable",
            ));
        }
    }
    causes
}

/// The resource a CRD serves. `encryption_key` carries over the key configured for it.
pub fn resource_def(crd: &Value, encryption_key: Option<String>) -> Option<ResourceDef> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let string_list = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let versions = spec["versions"].as_array()?;
    let mut served: Vec<String> = versions
        .iter()
        .filter(|v| v["served"].as_bool() == Some(true))
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    served.sort_by(|a, b| compare_versions(a, b));
    let has_status = versions
        .iter()
        .any(|v| v["subresources"]["status"].is_object())
        || spec["subresources"]["status"].is_object();
    let kind = names["kind"].as_str()?.to_string();
    let mut subresources = Vec::new();
    if has_status {
        subresources.push(SubresourceDef {
            name: "status".into(),
            kind: kind.clone(),
            verbs: vec!["get".into(), "patch".into(), "update".into()],
        });
    }
    Some(ResourceDef {
        group: spec["group"].as_str()?.to_string(),
        plural: names["plural"].as_str()?.to_string(),
        singular: names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase()),
        list_kind: names["listKind"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List")),
        kind,
        namespaced: spec["scope"].as_str() == Some("Namespaced"),
        short_names: string_list(&names["shortNames"]),
        categories: string_list(&names["categories"]),
        verbs: CUSTOM_RESOURCE_VERBS
            .iter()
            .map(|v| v.to_string())
            .collect(),
        served_versions: served,
        storage_version: storage_version(crd)?,
        extra_decodable_versions: Vec::new(),
        subresources,
        flavor: Flavor::Custom,
        encryption_key,
        allow_create_on_update: false,
        allow_unconditional_update: false,
        tracks_generation: true,
    })
}

/// The CRD most tests use: `widgets.example.test`, kind Widget, served in v1 and v2, stored in
/// v1.
pub fn widgets() -> Value {
    manifest("example.test", "widgets", "Widget", &["v1", "v2"])
}

/// A CRD manifest for tests: a namespaced kind with free-form spec and the given versions, the
/// first of `versions` being the storage version.
pub fn manifest(group: &str, plural: &str, kind: &str, versions: &[&str]) -> Value {
    let schema = json!({
        "openAPIV3Schema": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true
        }
    });
    let versions: Vec<Value> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({
                "name": v,
                "served": true,
                "storage": i == 0,
                "schema": schema,
                "subresources": {"status": {}}
            })
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "plural": plural,
                "singular": kind.to_lowercase(),
                "kind": kind,
                "listKind": format!("{kind}List"),
            },
            "scope": "Namespaced",
            "versions": versions,
            "conversion": {"strategy": "None"}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_versions_only_grow_through_spec_updates() {
        let mut crd = manifest("example.test", "widgets", "Widget", &["v1", "v2"]);
        prepare_for_create(&mut crd);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let old = crd.clone();
        crd["spec"]["versions"][0]["storage"] = json!(false);
        crd["spec"]["versions"][1]["storage"] = json!(true);
        prepare_for_update(&old, &mut crd);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1", "v2"]));
        assert!(validate(&crd, Some(&old)).is_empty());
    }

    #[test]
    fn storage_version_must_stay_in_stored_versions() {
        let mut crd = manifest("example.test", "widgets", "Widget", &["v2", "v1"]);
        prepare_for_create(&mut crd);
        crd["status"]["storedVersions"] = json!(["v1"]);
        let causes = validate(&crd, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "status.storedVersions");
    }

    #[test]
    fn served_resource_follows_the_crd() {
        let mut crd = manifest("example.test", "widgets", "Widget", &["v1", "v2"]);
        prepare_for_create(&mut crd);
        let def = resource_def(&crd, None).unwrap();
        assert_eq!(def.served_versions, ["v2", "v1"]);
        assert_eq!(def.storage_version, "v1");
        assert_eq!(def.storage_version_hash(), "zHyf2mNf1TY=");
        assert!(def.has_status());
        assert!(def.namespaced);
    }
}

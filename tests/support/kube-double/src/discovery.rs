//! Discovery: the legacy documents (`/api`, `/apis`, `/apis/<g>`, `/api/v1`,
//! `/apis/<g>/<v>`, recordings 01, 03a, 03b) and aggregated discovery v2 with ETag and
//! If-None-Match (recordings 02a, 02b).

use std::sync::Arc;

use http::{HeaderMap, Response, StatusCode, header};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::engine::Engine;
use crate::http::{Body, empty, full, json_bytes, json_response};
use crate::resources::{ResourceDef, compare_versions, group_version};

const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Every non-core group, in discovery order, with its served versions by priority.
fn groups(engine: &Engine) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for def in engine.catalog.all() {
        if def.group.is_empty() {
            continue;
        }
        let entry = match out.iter_mut().position(|(g, _)| *g == def.group) {
            Some(i) => &mut out[i],
            None => {
                out.push((def.group.clone(), Vec::new()));
                let last = out.len() - 1;
                &mut out[last]
            }
        };
        for v in &def.served_versions {
            if !entry.1.contains(v) {
                entry.1.push(v.clone());
            }
        }
    }
    for (_, versions) in out.iter_mut() {
        versions.sort_by(|a, b| compare_versions(a, b));
    }
    out
}

fn group_versions_json(group: &str, versions: &[String]) -> Value {
    let list: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(group, v), "version": v}))
        .collect();
    let preferred = list.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": list, "preferredVersion": preferred})
}

pub fn api_versions(engine: &Engine) -> Value {
    let address = engine.address.get().cloned().unwrap_or_default();
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]
    })
}

pub fn api_group_list(engine: &Engine) -> Value {
    let groups: Vec<Value> = groups(engine)
        .iter()
        .map(|(g, v)| group_versions_json(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(engine: &Engine, group: &str) -> Option<Value> {
    let (name, versions) = groups(engine).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_versions_json(&name, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn served_in(engine: &Engine, group: &str, version: &str) -> Vec<Arc<ResourceDef>> {
    let mut defs: Vec<Arc<ResourceDef>> = engine
        .catalog
        .all()
        .into_iter()
        .filter(|d| d.group == group && d.serves(version))
        .collect();
    defs.sort_by(|a, b| a.plural.cmp(&b.plural));
    defs
}

/// `APIResourceList` of one group/version: each resource with its storageVersionHash, then
/// each subresource as its own `<resource>/<sub>` entry (recording 03a). The core list has
/// no apiVersion field; group lists do.
pub fn api_resource_list(engine: &Engine, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for def in served_in(engine, group, version) {
        let mut r = Map::new();
        r.insert("name".into(), json!(def.plural));
        r.insert("singularName".into(), json!(def.singular));
        r.insert("namespaced".into(), json!(def.namespaced));
        r.insert("kind".into(), json!(def.kind));
        r.insert("verbs".into(), json!(def.verbs));
        if !def.short_names.is_empty() {
            r.insert("shortNames".into(), json!(def.short_names));
        }
        if !def.categories.is_empty() {
            r.insert("categories".into(), json!(def.categories));
        }
        if def.is_stored() {
            r.insert(
                "storageVersionHash".into(),
                json!(def.storage_version_hash()),
            );
        }
        resources.push(Value::Object(r));
        for sub in &def.subresources {
            resources.push(json!({
                "name": format!("{}/{}", def.plural, sub.name),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            }));
        }
    }
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut doc = json!({
        "kind": "APIResourceList",
        "groupVersion": group_version(group, version),
        "resources": resources,
    });
    if !group.is_empty() {
        doc["apiVersion"] = json!("v1");
    }
    doc
}

fn response_kind(def: &ResourceDef, version: &str, kind: &str) -> Value {
    // Built-in types report an empty group/version; custom resources name theirs (02a).
    if def.is_custom() {
        json!({"group": def.group, "version": version, "kind": kind})
    } else {
        json!({"group": "", "version": "", "kind": kind})
    }
}

fn aggregated_group(engine: &Engine, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let resources: Vec<Value> = served_in(engine, group, version)
                .iter()
                .map(|def| {
                    let mut r = Map::new();
                    r.insert("resource".into(), json!(def.plural));
                    r.insert(
                        "responseKind".into(),
                        response_kind(def, version, &def.kind),
                    );
                    r.insert(
                        "scope".into(),
                        json!(if def.namespaced {
                            "Namespaced"
                        } else {
                            "Cluster"
                        }),
                    );
                    r.insert("singularResource".into(), json!(def.singular));
                    r.insert("verbs".into(), json!(def.verbs));
                    if !def.short_names.is_empty() {
                        r.insert("shortNames".into(), json!(def.short_names));
                    }
                    if !def.categories.is_empty() {
                        r.insert("categories".into(), json!(def.categories));
                    }
                    if !def.subresources.is_empty() {
                        let subs: Vec<Value> = def
                            .subresources
                            .iter()
                            .map(|s| {
                                json!({
                                    "subresource": s.name,
                                    "responseKind": response_kind(def, version, &s.kind),
                                    "verbs": s.verbs,
                                })
                            })
                            .collect();
                        r.insert("subresources".into(), Value::Array(subs));
                    }
                    Value::Object(r)
                })
                .collect();
            json!({"version": version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() {
        json!({})
    } else {
        json!({"name": group})
    };
    json!({"metadata": metadata, "versions": versions})
}

pub fn aggregated_core(engine: &Engine) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [aggregated_group(engine, "", &["v1".to_string()])]
    })
}

pub fn aggregated_groups(engine: &Engine) -> Value {
    let items: Vec<Value> = groups(engine)
        .iter()
        .map(|(g, v)| aggregated_group(engine, g, v))
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items
    })
}

/// The aggregated document with `Cache-Control: public`, `Vary: Accept` and a quoted
/// SHA-512 ETag; a matching If-None-Match (quotes included) gets an empty 304 (02a, 02b).
pub fn aggregated_response(doc: &Value, request_headers: &HeaderMap) -> Response<Body> {
    let body = json_bytes(doc, false);
    let etag = format!(
        "\"{}\"",
        Sha512::digest(&body)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<String>()
    );
    let matches = request_headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let builder = Response::builder()
        .header(header::CACHE_CONTROL, "public")
        .header(header::ETAG, etag.as_str())
        .header(header::VARY, "Accept")
        .header("Audit-Id", uuid::Uuid::new_v4().to_string());
    let response = if matches {
        builder.status(StatusCode::NOT_MODIFIED).body(empty())
    } else {
        builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, AGGREGATED_CONTENT_TYPE)
            .body(full(body))
    };
    response.unwrap_or_else(|_| Response::new(empty()))
}

pub fn legacy_response(doc: &Value, pretty: bool) -> Response<Body> {
    json_response(StatusCode::OK, doc, pretty)
}

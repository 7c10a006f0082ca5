//! `Accept: application/json;as=Table;g=meta.k8s.io;v=v1` (recording 07): the columns
//! kube-apiserver prints for the double's built-in kinds, a custom resource's
//! `additionalPrinterColumns` for the version asked (Name and Age when it has none), one row per
//! object carrying it as PartialObjectMetadata (`includeObject=Metadata`, the default), the
//! whole object (`Object`) or nothing (`None`).

use serde_json::{Value, json};

use crate::engine::Engine;
use crate::resources::{GroupResource, ResourceDef};
use crate::status::{ApiResult, StatusError};

/// One column: its header, type and how a cell is read from an object.
struct Column {
    name: String,
    kind: &'static str,
    format: &'static str,
    cell: Cell,
}

enum Cell {
    Name,
    Age,
    /// A dot path into the object (`.spec.size`), as a CRD's printer column names it.
    Path(String),
    /// How many entries `data` and `binaryData` have (ConfigMap, Secret).
    DataCount,
    /// `readyReplicas/replicas` (Deployment).
    Ready,
}

fn column(name: &str, kind: &'static str, format: &'static str, cell: Cell) -> Column {
    Column {
        name: name.into(),
        kind,
        format,
        cell,
    }
}

/// What `includeObject` asks each row to carry.
pub fn include_object(query: Option<&str>) -> ApiResult<&'static str> {
    match query.unwrap_or("") {
        "" | "Metadata" => Ok("Metadata"),
        "None" => Ok("None"),
        "Object" => Ok("Object"),
        other => Err(StatusError::bad_request(format!(
            "includeObject: unsupported value: \"{other}\""
        ))),
    }
}

/// The Table of `objects` of `def` served in `version`.
pub fn table(
    engine: &Engine,
    def: &ResourceDef,
    version: &str,
    objects: &[Value],
    resource_version: Option<String>,
    include: &str,
) -> Value {
    let columns = columns(engine, def, version);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format,
                   "description": "", "priority": 0})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns.iter().map(|c| cell(&c.cell, object)).collect();
            let mut row = json!({"cells": cells});
            match include {
                "Metadata" => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": object["metadata"],
                    })
                }
                "Object" => row["object"] = object.clone(),
                _ => {}
            }
            row
        })
        .collect();
    let mut metadata = serde_json::Map::new();
    if let Some(rv) = resource_version {
        metadata.insert("resourceVersion".into(), json!(rv));
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// kube-apiserver's printers for the built-in kinds the double serves; a custom resource's
/// printer columns.
fn columns(engine: &Engine, def: &ResourceDef, version: &str) -> Vec<Column> {
    let name = || column("Name", "string", "name", Cell::Name);
    let age = || column("Age", "string", "", Cell::Age);
    let path = |header: &str, path: &str| column(header, "string", "", Cell::Path(path.into()));
    if def.is_custom() {
        return custom_columns(engine, def, version);
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "configmaps") => vec![name(), column("Data", "string", "", Cell::DataCount), age()],
        ("", "secrets") => vec![
            name(),
            path("Type", ".type"),
            column("Data", "string", "", Cell::DataCount),
            age(),
        ],
        ("", "namespaces") => vec![name(), path("Status", ".status.phase"), age()],
        ("apps", "deployments") => vec![
            name(),
            column("Ready", "string", "", Cell::Ready),
            path("Up-to-date", ".status.updatedReplicas"),
            path("Available", ".status.availableReplicas"),
            age(),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![name(), path("Holder", ".spec.holderIdentity"), age()]
        }
        _ => vec![name(), age()],
    }
}

/// `additionalPrinterColumns` of the version (Name first), or Name and Age.
fn custom_columns(engine: &Engine, def: &ResourceDef, version: &str) -> Vec<Column> {
    let name = column("Name", "string", "name", Cell::Name);
    let crds = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    let printer: Vec<Value> = engine
        .catalog
        .get(&crds)
        .and_then(|crd_def| {
            engine
                .get(&crd_def, None, &format!("{}.{}", def.plural, def.group))
                .ok()
        })
        .and_then(|crd| {
            crd["spec"]["versions"]
                .as_array()?
                .iter()
                .find(|v| v["name"] == version)?["additionalPrinterColumns"]
                .as_array()
                .cloned()
        })
        .unwrap_or_default();
    if printer.is_empty() {
        return vec![name, column("Age", "date", "", Cell::Age)];
    }
    let mut columns = vec![name];
    columns.extend(printer.iter().map(|c| {
        let kind = match c["type"].as_str() {
            Some("integer") => "integer",
            Some("number") => "number",
            Some("boolean") => "boolean",
            Some("date") => "date",
            _ => "string",
        };
        let path = c["jsonPath"].as_str().unwrap_or("").to_string();
        Column {
            name: c["name"].as_str().unwrap_or("").to_string(),
            kind,
            format: "",
            cell: if path == ".metadata.creationTimestamp" {
                Cell::Age
            } else {
                Cell::Path(path)
            },
        }
    }));
    columns
}

fn cell(cell: &Cell, object: &Value) -> Value {
    match cell {
        Cell::Name => object["metadata"]["name"].clone(),
        Cell::Age => json!(age(object["metadata"]["creationTimestamp"].as_str())),
        Cell::Path(path) => path
            .trim_start_matches('.')
            .split('.')
            .filter(|s| !s.is_empty())
            .fold(object, |v, key| &v[key])
            .clone(),
        Cell::DataCount => {
            let count = |field: &str| object[field].as_object().map_or(0, |m| m.len());
            json!(count("data") + count("binaryData"))
        }
        Cell::Ready => json!(format!(
            "{}/{}",
            object["status"]["readyReplicas"].as_i64().unwrap_or(0),
            object["spec"]["replicas"].as_i64().unwrap_or(0)
        )),
    }
}

/// kubectl's short age (`5s`, `3m`, `2h`, `4d`).
fn age(created: Option<&str>) -> String {
    let Some(created) = created.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let seconds = jiff::Timestamp::now()
        .duration_since(created)
        .as_secs()
        .max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

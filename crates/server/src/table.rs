//! Server-side printing (metav1.Table) and the metadata-only forms (PartialObjectMetadata and
//! PartialObjectMetadataList), built from any resource's `table_columns` / `table_row`
//! (recordings 06 and 07).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::negotiate::MetaVersion;
use super::params::IncludeObject;
use svm_registry::{ApiResult, RestStorage};

/// Turns objects of one resource and version into Table pieces.
pub(crate) struct TableWriter {
    resource: Arc<dyn RestStorage>,
    version: String,
    meta: MetaVersion,
    include: IncludeObject,
}

impl TableWriter {
    pub(crate) fn new(
        resource: Arc<dyn RestStorage>,
        version: &str,
        meta: MetaVersion,
        include: IncludeObject,
    ) -> Self {
        Self {
            resource,
            version: version.to_string(),
            meta,
            include,
        }
    }

    pub(crate) fn column_definitions(&self) -> Value {
        let columns: Vec<Value> = self
            .resource
            .table_columns()
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": c.type_,
                    "format": c.format,
                    "description": c.description,
                    "priority": c.priority,
                })
            })
            .collect();
        Value::Array(columns)
    }

    fn row(&self, object: &Value) -> ApiResult<Value> {
        let cells = self.resource.table_row(&self.version, object)?;
        let embedded = match self.include {
            IncludeObject::None => Value::Null,
            IncludeObject::Metadata => partial_object_metadata(object, self.meta),
            IncludeObject::Object => object.clone(),
        };
        Ok(json!({"cells": cells, "object": embedded}))
    }

    /// A Table of a list: its metadata (resourceVersion, continue, remainingItemCount) carried
    /// over.
    pub(crate) fn list_table(&self, list: &Value) -> ApiResult<Value> {
        let rows = items(list)
            .iter()
            .map(|item| self.row(item))
            .collect::<ApiResult<Vec<_>>>()?;
        Ok(self.table(list_metadata(list), Some(self.column_definitions()), rows))
    }

    /// A Table of one object; `with_columns` false leaves the column definitions out, as in
    /// every watch event after the first.
    pub(crate) fn object_table(&self, object: &Value, with_columns: bool) -> ApiResult<Value> {
        let mut metadata = Map::new();
        if let Some(rv) = object.pointer("/metadata/resourceVersion") {
            metadata.insert("resourceVersion".into(), rv.clone());
        }
        let columns = with_columns.then(|| self.column_definitions());
        Ok(self.table(Value::Object(metadata), columns, vec![self.row(object)?]))
    }

    fn table(&self, metadata: Value, columns: Option<Value>, rows: Vec<Value>) -> Value {
        json!({
            "kind": "Table",
            "apiVersion": self.meta.api_version(),
            "metadata": metadata,
            "columnDefinitions": columns.unwrap_or(Value::Null),
            "rows": rows,
        })
    }
}

fn items(list: &Value) -> &[Value] {
    list.get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn list_metadata(list: &Value) -> Value {
    list.get("metadata")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()))
}

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/<v>","metadata":{...}}`.
pub(crate) fn partial_object_metadata(object: &Value, meta: MetaVersion) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": meta.api_version(),
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list as PartialObjectMetadataList: every item carries kind and apiVersion.
pub(crate) fn partial_object_metadata_list(list: &Value, meta: MetaVersion) -> Value {
    let items: Vec<Value> = items(list)
        .iter()
        .map(|item| partial_object_metadata(item, meta))
        .collect();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": meta.api_version(),
        "metadata": list_metadata(list),
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::things;

    fn list() -> Value {
        json!({
            "apiVersion": "test.example.io/v1",
            "kind": "ThingList",
            "metadata": {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 1},
            "items": [
                {"apiVersion": "test.example.io/v1", "kind": "Thing",
                 "metadata": {"name": "a", "resourceVersion": "5", "uid": "u-a"},
                 "spec": {"size": 2}}
            ]
        })
    }

    #[test]
    fn list_table_carries_list_metadata_and_metadata_rows() {
        let writer = TableWriter::new(things(), "v1", MetaVersion::V1, IncludeObject::Metadata);
        let table = writer.list_table(&list()).expect("table");
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"]["continue"], "abc");
        assert_eq!(table["metadata"]["remainingItemCount"], 1);
        assert_eq!(table["columnDefinitions"][0]["name"], "Name");
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(table["rows"][0]["cells"], json!(["a", 2]));
        assert_eq!(
            table["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": {"name": "a", "resourceVersion": "5", "uid": "u-a"}})
        );
    }

    #[test]
    fn include_object_none_and_object() {
        let none = TableWriter::new(things(), "v1", MetaVersion::V1beta1, IncludeObject::None);
        let table = none.list_table(&list()).expect("table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1beta1");
        assert!(table["rows"][0]["object"].is_null());
        let full = TableWriter::new(things(), "v1", MetaVersion::V1, IncludeObject::Object);
        let object = &list()["items"][0];
        let table = full.object_table(object, false).expect("table");
        assert_eq!(&table["rows"][0]["object"], object);
        assert_eq!(table["metadata"], json!({"resourceVersion": "5"}));
        assert!(table["columnDefinitions"].is_null());
    }

    #[test]
    fn metadata_list_items_carry_kind() {
        let pom = partial_object_metadata_list(&list(), MetaVersion::V1);
        assert_eq!(pom["kind"], "PartialObjectMetadataList");
        assert_eq!(pom["metadata"]["resourceVersion"], "9");
        assert_eq!(pom["items"][0]["kind"], "PartialObjectMetadata");
        assert_eq!(pom["items"][0]["metadata"]["name"], "a");
        assert!(pom["items"][0].get("spec").is_none());
    }
}

//! The two calls a migration makes per page and per object: a metadata-only LIST page
//! (recording 06: `as=PartialObjectMetadataList`, so 10 KiB objects cost a few hundred bytes
//! each) and the no-op merge PATCH that carries only `metadata.resourceVersion` (recording 08:
//! the apiserver re-encodes the object in its current storage version and writes only when
//! the stored bytes change; a stale resourceVersion is a 409, recording 09a).

use http::Method;
use serde::Deserialize;

use super::client::ClusterClient;
use super::error::ClusterError;
use super::resources::ResolvedResource;

/// Accept header of a metadata-only list, with plain JSON as the fallback kube-apiserver
/// would use for a resource that cannot be transformed.
const METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// Accept header for the PATCH answer: only the metadata comes back, not the whole object.
const METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// An object to rewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub namespace: Option<String>,
    pub name: String,
    pub resource_version: String,
}

impl ObjectRef {
    /// `namespace/name` or `name`, as messages name objects.
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// One page of a LIST.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataPage {
    pub items: Vec<ObjectRef>,
    /// The token of the next page; `None` on the last page.
    pub continue_token: Option<String>,
    /// The apiserver's estimate of the objects after this page.
    pub remaining: Option<i64>,
    /// The list's resourceVersion (the snapshot the pages are read at).
    pub resource_version: String,
}

#[derive(Deserialize)]
struct ListBody {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<ItemBody>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: String,
    remaining_item_count: Option<i64>,
}

#[derive(Deserialize)]
struct ItemBody {
    #[serde(default)]
    metadata: ItemMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemMeta {
    #[serde(default)]
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    resource_version: String,
}

/// One page of `resource` across all namespaces, `limit` items, from `continue_token`.
pub async fn list_metadata(
    client: &ClusterClient,
    resource: &ResolvedResource,
    limit: u32,
    continue_token: Option<&str>,
) -> Result<MetadataPage, ClusterError> {
    let query = {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &limit.to_string());
        if let Some(token) = continue_token.filter(|t| !t.is_empty()) {
            query.append_pair("continue", token);
        }
        query.finish()
    };
    let path = format!("{}?{query}", resource.collection_path());
    let answer = client
        .request(Method::GET, &path, METADATA_LIST, None)
        .await?;
    let body: ListBody = serde_json::from_slice(&answer.body)
        .map_err(|e| ClusterError::Decode(format!("LIST {}: {e}", resource.group_resource())))?;
    Ok(MetadataPage {
        items: body
            .items
            .into_iter()
            .map(|item| ObjectRef {
                namespace: item.metadata.namespace.filter(|ns| !ns.is_empty()),
                name: item.metadata.name,
                resource_version: item.metadata.resource_version,
            })
            .collect(),
        continue_token: Some(body.metadata.continue_token).filter(|t| !t.is_empty()),
        remaining: body.metadata.remaining_item_count,
        resource_version: body.metadata.resource_version,
    })
}

/// What a no-op PATCH found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touched {
    /// Written again: the stored bytes changed (a new storage version or encryption key).
    Rewritten,
    /// Nothing to write: already stored in the current encoding (same resourceVersion back).
    AlreadyCurrent,
    /// 409: changed since it was listed, so it was written in the current encoding already.
    Conflict,
    /// 404: deleted since it was listed.
    Gone,
}

#[derive(Deserialize)]
struct PatchedBody {
    #[serde(default)]
    metadata: ItemMeta,
}

/// The no-op merge PATCH of one object.
pub async fn touch(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
) -> Result<Touched, ClusterError> {
    let path = resource.object_path(object.namespace.as_deref(), &object.name);
    let patch = serde_json::json!({"metadata": {"resourceVersion": object.resource_version}});
    let body = serde_json::to_vec(&patch)
        .map_err(|e| ClusterError::Decode(format!("encoding a patch: {e}")))?;
    match client
        .request(
            Method::PATCH,
            &path,
            METADATA,
            Some(("application/merge-patch+json", body)),
        )
        .await
    {
        Ok(answer) => {
            let patched: PatchedBody = serde_json::from_slice(&answer.body).map_err(|e| {
                ClusterError::Decode(format!("PATCH {}: {e}", object.display_name()))
            })?;
            Ok(
                if patched.metadata.resource_version == object.resource_version {
                    Touched::AlreadyCurrent
                } else {
                    Touched::Rewritten
                },
            )
        }
        Err(err) if err.is_conflict() => Ok(Touched::Conflict),
        Err(err) if err.is_not_found() => Ok(Touched::Gone),
        Err(err) => Err(err),
    }
}

//! `RestStorage` for `Store<S>`: JSON of a served version in and out, through the strategy's
//! decode/encode, on top of the typed operations.

use async_trait::async_trait;
use k8s_openapi::Metadata;
use serde_json::{Map, Value, json};

use super::super::continue_token::ContinueToken;
use super::super::error::{ApiError, ApiResult, FieldError};
use super::super::patch::Patch;
use super::super::rest::{
    DeleteOptions, Deleted, FieldValidation, GetOptions, ListParams, PatchType, RestStorage,
    Subresource, WatchEventStream, WatchParams, WriteOptions, Written,
};
use super::super::strategy::{ResourceInfo, Strategy, TableColumn};
use super::managed::{Tracking, request_manager};
use super::read::{ListPage, ListQuery, ReadAt};
use super::selection::Selection;
use super::{ObjectRef, Store};

impl<S: Strategy> Store<S> {
    fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group())
    }

    fn check_version(&self, version: &str) -> ApiResult<()> {
        if self.strategy.info().versions.contains(&version) {
            Ok(())
        } else {
            Err(ApiError::UnknownPath)
        }
    }

    fn encode(&self, version: &str, obj: &S::Object) -> ApiResult<Value> {
        self.strategy.encode(version, obj)
    }

    /// `<Kind> in version "<v>" cannot be handled as a <Kind>: <detail>` (400).
    fn cannot_handle(&self, body_kind: &str, body_version: &str, detail: &str) -> ApiError {
        ApiError::BadRequest(format!(
            "{body_kind} in version {body_version:?} cannot be handled as a {}: {detail}",
            self.kind()
        ))
    }

    /// The body's apiVersion and kind must name this kind in the URL's version; missing ones
    /// default to it (recording 16b).
    fn check_type_meta(&self, version: &str, body: &mut Value) -> ApiResult<()> {
        let expected = self.api_version(version);
        let Value::Object(map) = body else {
            return Err(ApiError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {})",
                self.kind()
            )));
        };
        let text = |field: &str| -> ApiResult<Option<String>> {
            match map.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(ApiError::BadRequest(format!(
                    "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go struct field .{field} of type string",
                    self.kind(),
                    json_type(other)
                ))),
            }
        };
        let api_version = text("apiVersion")?.unwrap_or_else(|| expected.clone());
        let kind = text("kind")?.unwrap_or_else(|| self.kind().to_string());
        let body_version = api_version
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let (body_group, _) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        if kind != self.kind() || body_group != self.group() {
            return Err(self.cannot_handle(
                &kind,
                &body_version,
                &format!("no kind {kind:?} is registered for version {api_version:?}"),
            ));
        }
        if api_version != expected {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({expected})"
            )));
        }
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
        Ok(())
    }

    /// Drop the fields the version's schema does not know: a 400 under Strict, one warning
    /// each under Warn (recording 16c).
    fn validate_fields(
        &self,
        version: &str,
        body: &mut Value,
        validation: FieldValidation,
    ) -> ApiResult<Vec<String>> {
        let Some(schemas) = self.schemas(version) else {
            return Ok(Vec::new());
        };
        let unknown = schemas.prune_unknown(&self.strategy.definition_name(version), body);
        let messages: Vec<String> = unknown
            .iter()
            .map(|path| format!("unknown field {path:?}"))
            .collect();
        match validation {
            FieldValidation::Strict if !messages.is_empty() => Err(self.cannot_handle(
                self.kind(),
                version,
                &format!("strict decoding error: {}", messages.join(", ")),
            )),
            FieldValidation::Warn => Ok(messages),
            _ => Ok(Vec::new()),
        }
    }

    /// A create/update body: type meta, namespace, field validation, then the strategy's
    /// decoding.
    fn decode_body(
        &self,
        version: &str,
        namespace: Option<&str>,
        mut body: Value,
        validation: FieldValidation,
    ) -> ApiResult<(S::Object, Vec<String>)> {
        self.check_type_meta(version, &mut body)?;
        self.place_in_namespace(namespace, &mut body)?;
        let warnings = self.validate_fields(version, &mut body, validation)?;
        let obj = self.strategy.decode(version, body)?;
        Ok((obj, warnings))
    }

    /// The request's namespace is the object's (upstream's
    /// `EnsureObjectNamespaceMatchesRequestNamespace`): an object of a namespaced kind without
    /// one gets it, one naming another is a 400. Cluster-scoped kinds drop any namespace on
    /// create and keep none on update.
    pub(super) fn place_in_namespace(
        &self,
        namespace: Option<&str>,
        object: &mut Value,
    ) -> ApiResult<()> {
        let Some(namespace) = namespace.filter(|ns| self.namespaced() && !ns.is_empty()) else {
            return Ok(());
        };
        let Some(Value::Object(meta)) = object.get_mut("metadata") else {
            if let Value::Object(map) = object {
                map.insert("metadata".into(), json!({"namespace": namespace}));
            }
            return Ok(());
        };
        match meta.get("namespace").and_then(Value::as_str).unwrap_or_default() {
            "" => {
                meta.insert("namespace".into(), Value::String(namespace.to_string()));
                Ok(())
            }
            given if given == namespace => Ok(()),
            _ => Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            )),
        }
    }

    /// The object a patch makes of `current`, in `version`.
    fn patched(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        patch: &Patch,
        current: &S::Object,
        validation: FieldValidation,
    ) -> ApiResult<(S::Object, Vec<String>)> {
        let original = self.encode(version, current)?;
        let mut patched = patch.apply(&original, &self.merge_rules(version))?;
        if !patched.is_object() {
            return Err(patch_invalid(
                &patched,
                "the patched object is not a JSON object",
            ));
        }
        self.check_type_meta(version, &mut patched)?;
        self.place_in_namespace(at.namespace, &mut patched)?;
        let name = at.name;
        let patched_name = patched
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if patched_name != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({patched_name}) does not match the name on the URL ({name})"
            )));
        }
        let snapshot = patched.to_string();
        let schemas = self.schemas(version);
        let unknown = schemas
            .map(|s| s.prune_unknown(&self.strategy.definition_name(version), &mut patched))
            .unwrap_or_default();
        let messages: Vec<String> = unknown
            .iter()
            .map(|path| format!("unknown field {path:?}"))
            .collect();
        let warnings = match validation {
            // Upstream reports a strict patch failure as an invalid patch (422).
            FieldValidation::Strict if !messages.is_empty() => {
                return Err(patch_invalid_text(
                    &snapshot,
                    &format!("strict decoding error: {}", messages.join(", ")),
                ));
            }
            FieldValidation::Warn => messages,
            _ => Vec::new(),
        };
        let obj = self.strategy.decode(version, patched)?;
        Ok((obj, warnings))
    }

    fn list_json(&self, version: &str, page: ListPage<S::Object>) -> ApiResult<Value> {
        let mut items = Vec::with_capacity(page.items.len());
        for obj in &page.items {
            let mut item = self.encode(version, obj)?;
            // Items of a built-in list carry no type meta.
            if let Value::Object(map) = &mut item {
                map.shift_remove("kind");
                map.shift_remove("apiVersion");
            }
            items.push(item);
        }
        let mut metadata = Map::new();
        metadata.insert("resourceVersion".into(), json!(page.revision.to_string()));
        if let Some(token) = page.continue_token {
            metadata.insert("continue".into(), json!(token));
        }
        if let Some(remaining) = page.remaining_item_count {
            metadata.insert("remainingItemCount".into(), json!(remaining));
        }
        Ok(json!({
            "kind": self.strategy.info().list_kind,
            "apiVersion": self.api_version(version),
            "metadata": metadata,
            "items": items,
        }))
    }

    fn list_query(&self, namespace: Option<&str>, params: &ListParams) -> ApiResult<ListQuery<S>> {
        let namespace = namespace
            .filter(|ns| self.namespaced() && !ns.is_empty())
            .map(str::to_string);
        let selection = Selection::parse(
            self.strategy.clone(),
            params.label_selector.as_deref(),
            params.field_selector.as_deref(),
        )?;
        let limit = params
            .limit
            .filter(|l| *l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let resource_version = params
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty());
        let continue_token = match params.continue_token.as_deref().filter(|c| !c.is_empty()) {
            None => None,
            Some(token) => {
                let token = ContinueToken::decode(token)?;
                if resource_version.is_some_and(|rv| rv != "0") {
                    return Err(ApiError::BadRequest(
                        "specifying resource version is not allowed when using continue".into(),
                    ));
                }
                Some(token)
            }
        };
        let read_at = match continue_token {
            Some(_) => ReadAt::Current,
            None => ReadAt::for_list(
                resource_version,
                params.resource_version_match.as_deref(),
                limit.is_some(),
            )?,
        };
        Ok(ListQuery {
            selection: selection.within(namespace.clone()),
            namespace,
            limit,
            continue_token,
            read_at,
        })
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Upstream's answer to a patch whose result does not decode: 422 on the patch.
fn patch_invalid(patched: &Value, detail: &str) -> ApiError {
    patch_invalid_text(&patched.to_string(), detail)
}

fn patch_invalid_text(patched: &str, detail: &str) -> ApiError {
    ApiError::Invalid {
        group: String::new(),
        kind: String::new(),
        name: String::new(),
        causes: vec![FieldError::invalid("patch", patched, detail)],
    }
}

#[async_trait]
impl<S: Strategy> RestStorage for Store<S> {
    fn info(&self) -> &ResourceInfo {
        self.strategy.info()
    }

    fn protobuf(&self) -> Option<&'static dyn crate::protobuf::ProtobufKind> {
        self.strategy.protobuf()
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        self.strategy.openapi_definitions(version)
    }

    fn definition_name(&self, version: &str) -> String {
        self.strategy.definition_name(version)
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        self.strategy.table_columns()
    }

    fn table_row(&self, version: &str, object: &Value) -> ApiResult<Vec<Value>> {
        // List items come without type meta: give the strategy a whole object.
        let mut object = object.clone();
        if let Value::Object(map) = &mut object {
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(self.api_version(version)));
            map.entry("kind")
                .or_insert_with(|| Value::String(self.kind().to_string()));
        }
        let obj = self.strategy.decode(version, object)?;
        Ok(self.strategy.table_row(&obj))
    }

    async fn get(&self, version: &str, at: ObjectRef<'_>, opts: &GetOptions) -> ApiResult<Value> {
        self.check_version(version)?;
        let obj = self
            .get_with_version(at, opts.resource_version.as_deref())
            .await?;
        self.encode(version, &obj)
    }

    async fn list(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> ApiResult<Value> {
        self.check_version(version)?;
        let page = self.list_page(self.list_query(namespace, params)?).await?;
        self.list_json(version, page)
    }

    async fn watch(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> ApiResult<WatchEventStream> {
        self.check_version(version)?;
        let namespace = namespace.filter(|ns| self.namespaced() && !ns.is_empty());
        self.rest_watch(version, namespace, params).await
    }

    async fn create(
        &self,
        version: &str,
        namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.check_version(version)?;
        let (obj, mut warnings) =
            self.decode_body(version, namespace, body, opts.field_validation)?;
        let manager = request_manager(opts);
        let tracking = Tracking::Update {
            version,
            manager: &manager,
        };
        let created = self
            .create_object(obj, opts.dry_run, super::Also::default(), tracking)
            .await?;
        warnings.extend(self.strategy.warnings_on_create(&created));
        Ok(Written {
            object: self.encode(version, &created)?,
            created: true,
            warnings,
        })
    }

    async fn update(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        mut body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.check_version(version)?;
        let name = at.name;
        // The URL names the object when the body does not; a different name is a 400.
        if let Value::Object(map) = &mut body
            && let Value::Object(meta) = map.entry("metadata").or_insert_with(|| json!({}))
        {
            match meta.get("name").and_then(Value::as_str).unwrap_or_default() {
                "" => {
                    meta.insert("name".into(), Value::String(name.to_string()));
                }
                body_name if body_name != name => {
                    return Err(ApiError::BadRequest(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )));
                }
                _ => {}
            }
        }
        let (obj, mut warnings) =
            self.decode_body(version, at.namespace, body, opts.field_validation)?;
        let manager = request_manager(opts);
        let tracking = Tracking::Update {
            version,
            manager: &manager,
        };
        let updated = self
            .replace(obj, subresource, opts.dry_run, tracking)
            .await?;
        warnings.extend(updated.warnings);
        Ok(Written {
            object: self.encode(version, &updated.object)?,
            created: false,
            warnings,
        })
    }

    async fn patch(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        patch_type: PatchType,
        patch: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.check_version(version)?;
        if patch_type == PatchType::Apply {
            return self.apply(version, at, subresource, patch, opts).await;
        }
        let patch = Patch::parse(patch_type, patch)?;
        let mut warnings = Vec::new();
        let manager = request_manager(opts);
        let tracking = Tracking::Update {
            version,
            manager: &manager,
        };
        let updated = self
            .guaranteed_update_with(
                at,
                subresource,
                opts.dry_run,
                super::Also::default(),
                tracking,
                |current| {
                    let (obj, attempt_warnings) =
                        self.patched(version, at, &patch, current, opts.field_validation)?;
                    warnings = attempt_warnings;
                    Ok(obj)
                },
            )
            .await?;
        warnings.extend(updated.warnings);
        Ok(Written {
            object: self.encode(version, &updated.object)?,
            created: false,
            warnings,
        })
    }

    async fn delete(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        self.check_version(version)?;
        let deletion = self
            .delete_object(
                at,
                &opts.preconditions,
                opts.propagation_policy.as_deref(),
                opts.dry_run,
                super::Also::default(),
            )
            .await?;
        Ok(Deleted {
            object: self.encode(version, &deletion.object)?,
            gone: deletion.gone,
        })
    }

    async fn delete_collection(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &ListParams,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        self.check_version(version)?;
        // Without a limit the list is one page; with one, only that page is deleted, as
        // upstream does.
        let page = self.list_page(self.list_query(namespace, params)?).await?;
        for obj in &page.items {
            match self
                .delete_object(
                    ObjectRef::of(obj.metadata()),
                    &opts.preconditions,
                    opts.propagation_policy.as_deref(),
                    opts.dry_run,
                    super::Also::default(),
                )
                .await
            {
                Ok(_) | Err(ApiError::NotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        self.list_json(version, page)
    }
}

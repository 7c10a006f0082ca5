//! `metadata.managedFields` and server-side apply, as kube-apiserver keeps them
//! (k8s.io/apimachinery `pkg/util/managedfields` over sigs.k8s.io/structured-merge-diff).
//!
//! Hand-written: no maintained Rust crate implements structured-merge-diff (kube-rs is a
//! client; it sends apply patches but never merges them). The pieces follow upstream's:
//!
//! - [`fieldpath`]: field sets and their `FieldsV1` form;
//! - [`schema`]: the typed schema, built from the kind's OpenAPI definitions (the one owner
//!   of list semantics: `x-kubernetes-list-type` / `-list-map-keys`);
//! - [`typed`]: validation, field sets, comparison, merge and removal of typed values;
//! - [`updater`]: ownership after an Update or an Apply (conflicts, force, pruning), each
//!   manager compared in its own API version through the kind's conversion;
//! - this module: the managedFields wire form (one entry per manager, operation, API
//!   version for updaters, and subresource; sorted as upstream sorts them), manager names
//!   (`fieldManager`, else the User-Agent's first segment), timestamps, the
//!   `managedFields: [{}]` reset, metadata that is never owned, the cap of ten update
//!   entries, and the `kubectl` last-applied annotation kept in step with server-side apply.

pub(crate) mod fieldpath;
pub(crate) mod schema;
pub(crate) mod typed;
pub(crate) mod updater;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use self::fieldpath::{Path, PathElement, Set, path_string};
use self::schema::TypedSchema;
use self::typed::{Typed, render_errors};
use self::updater::{
    ManagedFields, ManagerId, Operation, UpdateError, Updater, Versioned, VersionedSet, Versions,
};
use super::error::{ApiError, FieldError};
use super::rest::Subresource;

/// Upstream's cap on Update entries; older ones are merged into `ancient-changes`.
pub(crate) const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_CHANGES: &str = "ancient-changes";
/// The temporary identity of the fields one Update changes.
const CURRENT_OPERATION: &str = "current-operation";
/// kubectl's client-side apply record, kept in step when `kubectl` applies server-side.
pub(crate) const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// kubectl's server-side apply manager, whose client-side past the server helps with.
const KUBECTL: &str = "kubectl";
/// `fieldManager`'s upper bound (and of a name taken from the User-Agent).
const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// The manager of a write: `fieldManager` when given, else the User-Agent up to its first
/// `/` (printable characters only, at most 128 bytes), as kube-apiserver names it.
pub(crate) fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(manager) = field_manager.filter(|m| !m.is_empty()) {
        return manager.to_string();
    }
    let prefix = user_agent
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// The managed fields of an object: each manager's fields and the time it last changed
/// something.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Managed {
    /// Each manager's fields, keyed by who wrote them how (manager, operation, version,
    /// subresource).
    pub fields: ManagedFields,
    /// Each manager's `time`, as the entry carried it (RFC 3339 text); missing when it had none.
    pub times: BTreeMap<ManagerId, Value>,
}

/// The paths no manager ever owns (upstream's strip-meta manager).
fn stripped() -> Set {
    let mut set = Set::new();
    for path in [
        &["apiVersion"][..],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "managedFields"],
        &["metadata", "resourceVersion"],
    ] {
        let path: Path = path.iter().map(|p| PathElement::field(p)).collect();
        set.insert(&path);
    }
    set
}

fn time_seconds(time: Option<&Value>) -> i64 {
    time.and_then(Value::as_str)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map_or(0, |t| t.as_second())
}

fn now() -> Value {
    serde_json::to_value(super::clock::now()).unwrap_or(Value::Null)
}

/// `metadata.managedFields` of an object (`None` when absent or null).
fn entries_of(object: &Value) -> Option<&Value> {
    object
        .pointer("/metadata/managedFields")
        .filter(|v| !v.is_null())
}

fn remove_entries(object: &mut Value) -> Option<Value> {
    object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.shift_remove("managedFields"))
}

fn set_entries(object: &mut Value, entries: Option<Value>) {
    let Some(Value::Object(map)) = object.as_object_mut().map(|m| {
        m.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
    }) else {
        return;
    };
    match entries {
        Some(entries) => {
            map.insert("managedFields".into(), entries);
        }
        None => {
            map.shift_remove("managedFields");
        }
    }
}

/// `managedFields: []` or `[{}]`: the client asks to reset them.
fn is_reset(entries: Option<&Value>) -> bool {
    match entries {
        Some(Value::Array(list)) => match list.as_slice() {
            [] => true,
            [Value::Object(entry)] => entry.is_empty(),
            _ => false,
        },
        _ => false,
    }
}

impl Managed {
    /// Decode `metadata.managedFields` (upstream's checks and texts).
    pub(crate) fn decode(entries: Option<&Value>) -> Result<Managed, String> {
        let mut managed = Managed::default();
        let Some(entries) = entries else {
            return Ok(managed);
        };
        let Value::Array(entries) = entries else {
            return Err("managedFields must be a list".into());
        };
        for (i, entry) in entries.iter().enumerate() {
            let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
            let operation = match text("operation") {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return Err("operation must be `Apply` or `Update`".into()),
            };
            let api_version = text("apiVersion");
            if api_version.is_empty() {
                return Err("apiVersion must not be empty".into());
            }
            match text("fieldsType") {
                "FieldsV1" => {}
                "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
                other => {
                    return Err(format!(
                        "invalid fieldsType {other:?} in managed fields entry {i}"
                    ));
                }
            }
            let set = match entry.get("fieldsV1") {
                None | Some(Value::Null) => Set::new(),
                Some(fields) => Set::from_fields_v1(fields)
                    .map_err(|e| format!("error decoding versioned set: {e}"))?,
            };
            let id = ManagerId::new(text("manager"), operation, api_version, text("subresource"));
            managed.fields.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: api_version.to_string(),
                    applied: operation == Operation::Apply,
                },
            );
            if let Some(time) = entry.get("time").filter(|t| !t.is_null()) {
                managed.times.insert(id, time.clone());
            }
        }
        Ok(managed)
    }

    /// The wire form, sorted as upstream sorts it (Apply before Update, then by time,
    /// manager, API version, subresource); `None` when no manager owns anything.
    pub(crate) fn encode(&self) -> Option<Value> {
        if self.fields.is_empty() {
            return None;
        }
        let mut entries: Vec<(&ManagerId, &VersionedSet)> = self.fields.iter().collect();
        entries.sort_by(|(a, va), (b, vb)| {
            let operation = |id: &ManagerId, v: &VersionedSet| {
                if v.applied {
                    Operation::Apply
                } else {
                    id.operation
                }
            };
            operation(a, va)
                .cmp(&operation(b, vb))
                .then_with(|| {
                    time_seconds(self.times.get(*a)).cmp(&time_seconds(self.times.get(*b)))
                })
                .then_with(|| a.manager.cmp(&b.manager))
                .then_with(|| va.api_version.cmp(&vb.api_version))
                .then_with(|| a.subresource.cmp(&b.subresource))
        });
        let list = entries
            .into_iter()
            .map(|(id, owned)| {
                let mut entry = Map::new();
                entry.insert("manager".into(), json!(id.manager));
                let operation = if owned.applied { "Apply" } else { "Update" };
                entry.insert("operation".into(), json!(operation));
                entry.insert("apiVersion".into(), json!(owned.api_version));
                if let Some(time) = self.times.get(id) {
                    entry.insert("time".into(), time.clone());
                }
                entry.insert("fieldsType".into(), json!("FieldsV1"));
                entry.insert("fieldsV1".into(), owned.set.to_fields_v1());
                if !id.subresource.is_empty() {
                    entry.insert("subresource".into(), json!(id.subresource));
                }
                Value::Object(entry)
            })
            .collect();
        Some(Value::Array(list))
    }

    fn strip(&mut self, id: &ManagerId) {
        if let Some(owned) = self.fields.get_mut(id) {
            owned.set = owned.set.difference(&stripped());
            if owned.set.is_empty() {
                self.fields.remove(id);
            }
        }
    }

    /// Merge the oldest Update entries of each API version into `ancient-changes` while
    /// more than [`MAX_UPDATE_MANAGERS`] remain.
    fn cap_update_managers(&mut self) {
        let mut updaters: Vec<ManagerId> = self
            .fields
            .iter()
            .filter(|(_, owned)| !owned.applied)
            .map(|(id, _)| id.clone())
            .collect();
        if updaters.len() <= MAX_UPDATE_MANAGERS {
            return;
        }
        updaters.sort_by(|a, b| {
            time_seconds(self.times.get(a))
                .cmp(&time_seconds(self.times.get(b)))
                .then_with(|| a.cmp(b))
        });
        let mut first_of_version: BTreeMap<String, ManagerId> = BTreeMap::new();
        let mut remaining = updaters.len();
        for id in updaters {
            if remaining <= MAX_UPDATE_MANAGERS {
                break;
            }
            let Some(owned) = self.fields.get(&id).cloned() else {
                continue;
            };
            let bucket = ManagerId::new(ANCIENT_CHANGES, Operation::Update, &owned.api_version, "");
            match first_of_version.get(&owned.api_version) {
                Some(first) => {
                    if !self.fields.contains_key(&bucket)
                        && let Some(first_set) = self.fields.remove(first)
                    {
                        self.fields.insert(bucket.clone(), first_set);
                    }
                    if let Some(bucket_set) = self.fields.get_mut(&bucket) {
                        bucket_set.set = owned.set.union(&bucket_set.set);
                    }
                    self.fields.remove(&id);
                    remaining -= 1;
                    if let Some(time) = self.times.get(&id).cloned() {
                        self.times.insert(bucket, time);
                    }
                }
                None => {
                    first_of_version.insert(owned.api_version.clone(), id);
                }
            }
        }
        let fields = &self.fields;
        self.times.retain(|id, _| fields.contains_key(id));
    }
}

/// Why an apply failed, mapped to kube-apiserver's answers.
fn conflict_error(conflicts: &[(ManagerId, Path)], managed: &Managed) -> ApiError {
    let describe = |id: &ManagerId| {
        let time = managed.times.get(id).and_then(Value::as_str);
        id.describe(time)
    };
    let causes = conflicts
        .iter()
        .map(|(id, path)| FieldError {
            reason: "FieldManagerConflict",
            field: path_string(path),
            message: format!("conflict with {}", describe(id)),
        })
        .collect();
    let message = match conflicts {
        [(id, path)] => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            describe(id),
            path_string(path)
        ),
        _ => {
            let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (id, path) in conflicts {
                by_manager
                    .entry(describe(id))
                    .or_default()
                    .push(path_string(path));
            }
            let mut lines = Vec::new();
            for (manager, paths) in by_manager {
                lines.push(format!("conflicts with {manager}:"));
                lines.extend(paths.into_iter().map(|p| format!("- {p}")));
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    ApiError::ApplyConflict { message, causes }
}

/// One write's context: the API version it speaks, its subresource, its manager, and how
/// to convert the object to another served version.
pub(crate) struct Write<'a> {
    /// The `group/version` the request speaks (the version the body is in).
    pub api_version: &'a str,
    /// The part of the object written: the main resource or `/status`.
    pub subresource: Subresource,
    /// The manager's name ([`manager_name`]).
    pub manager: &'a str,
    /// Converts the object to another served `group/version`; an `Err` names why it cannot.
    pub convert: &'a (dyn Fn(&Versioned, &str) -> Result<Versioned, String> + Sync),
}

impl Write<'_> {
    fn subresource_name(&self) -> &'static str {
        match self.subresource {
            Subresource::Main => "",
            Subresource::Status => "status",
        }
    }
}

/// A kind's field manager: its typed schema per API version and the fields its strategy
/// resets (status on the main resource; spec and metadata on `/status`).
pub(crate) struct FieldManager {
    kind: &'static str,
    schemas: BTreeMap<String, TypedSchema>,
    reset_main: Set,
    reset_status: Set,
}

struct KindVersions<'a> {
    manager: &'a FieldManager,
    write: &'a Write<'a>,
}

impl Versions for KindVersions<'_> {
    fn schema(&self, api_version: &str) -> Option<&TypedSchema> {
        self.manager.schemas.get(api_version)
    }

    fn convert(&self, object: &Versioned, api_version: &str) -> Result<Versioned, String> {
        (self.write.convert)(object, api_version)
    }

    fn ignored(&self, _api_version: &str) -> Option<&Set> {
        Some(match self.write.subresource {
            Subresource::Main => &self.manager.reset_main,
            Subresource::Status => &self.manager.reset_status,
        })
    }
}

impl FieldManager {
    /// `schemas` by served version (`v1`, ...), rooted at the kind.
    pub(crate) fn new(
        group: &'static str,
        kind: &'static str,
        schemas: BTreeMap<&'static str, TypedSchema>,
        has_status_subresource: bool,
    ) -> Self {
        let field = |name: &str| vec![PathElement::field(name)];
        let reset_main = if has_status_subresource {
            Set::from_paths([field("status").as_slice()])
        } else {
            Set::new()
        };
        let reset_status =
            Set::from_paths([field("spec").as_slice(), field("metadata").as_slice()]);
        FieldManager {
            kind,
            schemas: schemas
                .into_iter()
                .map(|(v, s)| (format!("{group}/{v}"), s))
                .collect(),
            reset_main,
            reset_status,
        }
    }

    /// Record a create, update or non-apply patch: `new` (the object the request makes, in
    /// the request's version) gets the managed fields it should be stored with. Never
    /// fails: on an internal error `new` keeps the live managed fields (upstream's
    /// `UpdateNoErrors`).
    pub(crate) fn update(&self, write: &Write<'_>, live: &Value, new: &mut Value) {
        let requested = entries_of(new).cloned();
        let live_entries = entries_of(live).cloned();
        let managed = if write.subresource != Subresource::Main {
            Managed::decode(live_entries.as_ref()).unwrap_or_default()
        } else if is_reset(requested.as_ref()) {
            Managed::default()
        } else {
            match Managed::decode(requested.as_ref()) {
                Ok(m) if !m.fields.is_empty() => m,
                _ => Managed::decode(live_entries.as_ref()).unwrap_or_default(),
            }
        };
        remove_entries(new);
        let mut live = live.clone();
        remove_entries(&mut live);
        match self.track_update(write, &live, new, managed) {
            Ok(managed) => set_entries(new, managed.encode()),
            Err(err) => {
                tracing::error!(
                    error = %err,
                    kind = self.kind,
                    "[SHOULD NOT HAPPEN] failed to update managedFields (kept the live ones)"
                );
                set_entries(new, live_entries);
            }
        }
    }

    fn track_update(
        &self,
        write: &Write<'_>,
        live: &Value,
        new: &Value,
        mut managed: Managed,
    ) -> Result<Managed, String> {
        let versions = KindVersions {
            manager: self,
            write,
        };
        let updater = Updater {
            versions: &versions,
        };
        let name = if write.manager.is_empty() {
            "unknown"
        } else {
            write.manager
        };
        let id = ManagerId::new(
            name,
            Operation::Update,
            write.api_version,
            write.subresource_name(),
        );
        let current = ManagerId::new(CURRENT_OPERATION, Operation::Update, "", "");
        let live = Versioned {
            value: live.clone(),
            api_version: write.api_version.to_string(),
        };
        let new = Versioned {
            value: new.clone(),
            api_version: write.api_version.to_string(),
        };
        updater.update_fields(&live, &new, &mut managed.fields, &current)?;
        managed.strip(&current);
        if let Some(changed) = managed.fields.remove(&current) {
            let set = match managed.fields.get(&id) {
                Some(previous) => changed.set.union(&previous.set),
                None => changed.set,
            };
            managed.fields.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: changed.api_version,
                    applied: false,
                },
            );
            managed.times.insert(id, now());
        }
        managed.cap_update_managers();
        Ok(managed)
    }

    /// A server-side apply of `config` (the decoded apply body) by `write.manager` to
    /// `live` (the stored object in the request's version, or the kind's empty object for a
    /// create). Returns the object to store, with its managed fields; what the merge emptied
    /// is `null` (absent once decoded, as in Go).
    pub(crate) fn apply(
        &self,
        write: &Write<'_>,
        live: &Value,
        config: &Value,
        force: bool,
    ) -> Result<Value, ApiError> {
        let mut managed = Managed::decode(entries_of(live))
            .map_err(|e| ApiError::Unknown(format!("failed to decode managed fields: {e}")))?;
        let gvk = self.check_apply_body(write, config)?;
        let schema = self
            .schemas
            .get(write.api_version)
            .ok_or_else(|| ApiError::Internal(format!("no schema for {}", write.api_version)))?;
        let typed = Typed::new(schema);
        let live = typed_inputs(&typed, config, live, &gvk)?;
        let id = ManagerId::new(
            write.manager,
            Operation::Apply,
            "",
            write.subresource_name(),
        );
        let (fields, applied) =
            self.merge_apply(&typed, write, &managed, &live, config, &id, force)?;
        managed.fields = fields;
        let mut object = match applied {
            Some(new) => {
                managed.times.insert(id.clone(), now());
                new.value
            }
            None => live,
        };
        managed.strip(&id);
        let fields = &managed.fields;
        managed.times.retain(|id, _| fields.contains_key(id));
        if write.manager == KUBECTL {
            keep_last_applied(&mut object, config);
        }
        set_entries(&mut object, managed.encode());
        Ok(object)
    }

    /// An apply body must be of the request's kind and version and must not set
    /// managedFields. Returns its `group/version, Kind=kind` for messages.
    fn check_apply_body(&self, write: &Write<'_>, config: &Value) -> Result<String, ApiError> {
        let text = |key: &str| config.get(key).and_then(Value::as_str).unwrap_or_default();
        let (group, version) = match text("apiVersion").rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), text("apiVersion").to_string()),
        };
        let gvk = format!("{group}/{version}, Kind={}", text("kind"));
        if format!("{group}/{version}") != write.api_version || text("kind") != self.kind {
            return Err(ApiError::BadRequest(format!("invalid object type: {gvk}")));
        }
        if config.pointer("/metadata/managedFields").is_some() {
            return Err(ApiError::BadRequest(
                "metadata.managedFields must be nil".into(),
            ));
        }
        Ok(gvk)
    }

    /// The structured merge of `config` into `live`, as `id`: the new managers' field sets
    /// and the merged object (`None`: nothing changed). A conflict is the 409 upstream
    /// answers, except that kubectl moving from client-side apply has the conflicts its
    /// last-applied record already agrees with forced (upstream's last-applied manager).
    #[allow(clippy::too_many_arguments)]
    fn merge_apply(
        &self,
        typed: &Typed<'_>,
        write: &Write<'_>,
        managed: &Managed,
        live: &Value,
        config: &Value,
        id: &ManagerId,
        force: bool,
    ) -> Result<(ManagedFields, Option<Versioned>), ApiError> {
        let versions = KindVersions {
            manager: self,
            write,
        };
        let updater = Updater {
            versions: &versions,
        };
        let versioned = |value: &Value| Versioned {
            value: value.clone(),
            api_version: write.api_version.to_string(),
        };
        let (live_v, config_v) = (versioned(live), versioned(config));
        let mut fields = managed.fields.clone();
        let mut outcome = updater.apply(&live_v, &config_v, &mut fields, id, force);
        if let Err(UpdateError::Conflicts(conflicts)) = &outcome
            && write.manager == KUBECTL
        {
            let allowed = last_applied_agreement(typed, write.api_version, live);
            let remaining: Vec<(ManagerId, Path)> = conflicts
                .iter()
                .filter(|(_, path)| !allowed.has(path))
                .cloned()
                .collect();
            outcome = if remaining.is_empty() {
                fields = managed.fields.clone();
                updater.apply(&live_v, &config_v, &mut fields, id, true)
            } else {
                Err(UpdateError::Conflicts(remaining))
            };
        }
        match outcome {
            Ok(applied) => Ok((fields, applied)),
            Err(UpdateError::Conflicts(conflicts)) => Err(conflict_error(&conflicts, managed)),
            Err(UpdateError::Internal(e)) => Err(ApiError::Unknown(e)),
        }
    }
}

/// Both sides of an apply, checked against the schema: the body as a partial object, the live
/// object (without its managed fields) as a complete one. Returns the live object so cleaned.
fn typed_inputs(
    typed: &Typed<'_>,
    config: &Value,
    live: &Value,
    gvk: &str,
) -> Result<Value, ApiError> {
    let text = |pointer: &str| {
        config
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let object_name = format!(
        "{}/{}; {gvk}",
        text("/metadata/namespace"),
        text("/metadata/name")
    );
    let errors = typed.validate(config, false);
    if !errors.is_empty() {
        return Err(ApiError::Unknown(format!(
            "failed to create typed patch object ({object_name}): {}",
            render_errors(&errors)
        )));
    }
    let mut live = live.clone();
    remove_entries(&mut live);
    let errors = typed.validate(&live, true);
    if !errors.is_empty() {
        return Err(ApiError::Unknown(format!(
            "failed to create typed live object ({object_name}): {}",
            render_errors(&errors)
        )));
    }
    Ok(live)
}

/// The fields of the live object's `last-applied-configuration` whose values the object
/// still has (empty when there is no usable record).
fn last_applied_agreement(typed: &Typed<'_>, api_version: &str, live: &Value) -> Set {
    let record = live
        .pointer(&format!(
            "/metadata/annotations/{}",
            LAST_APPLIED_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    let Some(record) =
        record.filter(|r| r.get("apiVersion").and_then(Value::as_str) == Some(api_version))
    else {
        return Set::new();
    };
    if !typed.validate(&record, false).is_empty() {
        return Set::new();
    }
    let comparison = typed.compare(&record, live);
    typed
        .to_field_set(&record)
        .difference(&comparison.modified)
        .difference(&comparison.added)
        .difference(&comparison.removed)
}

/// When `kubectl` applies server-side to an object that also has client-side apply's
/// record, the record follows the applied configuration, so a later client-side apply
/// computes its patch from what was applied last (upstream's last-applied updater).
fn keep_last_applied(object: &mut Value, config: &Value) {
    let has_record = object
        .pointer(&format!(
            "/metadata/annotations/{}",
            LAST_APPLIED_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if !has_record {
        return;
    }
    let mut record = config.clone();
    if let Some(annotations) = record
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(
            LAST_APPLIED_ANNOTATION.into(),
            Value::String(record.to_string()),
        );
    }
}

#[cfg(test)]
mod tests;

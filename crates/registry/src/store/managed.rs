//! managedFields on every write, and server-side apply: the store's side of
//! [`managed_fields`](crate::managed_fields). Every create, update and patch is
//! recorded for its manager (an Update entry) before the strategy prepares and validates
//! the object, as kube-apiserver's field manager runs before `BeforeCreate`/`BeforeUpdate`;
//! an apply computes the new object and its managed fields in one step and may create.

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::Value;

use super::super::error::{ApiError, ApiResult};
use super::super::managed_fields::typed::strip_nulls;
use super::super::managed_fields::updater::Versioned;
use super::super::managed_fields::{Write, manager_name};
use super::super::rest::{FieldValidation, Subresource, WriteOptions, Written};
use super::super::strategy::Strategy;
use super::{Also, ObjectRef, Store, Updated};

/// The field manager of the typed (controller) writes when none is named.
pub(super) const DEFAULT_FIELD_MANAGER: &str = "svm-apiserver";

/// How often an apply that may create retries when it races another create or delete.
const APPLY_ATTEMPTS: usize = 4;

/// Who a write is recorded for in managedFields, and in which served version.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tracking<'a> {
    /// A create, update or non-apply patch by `manager`, speaking `version`.
    Update { version: &'a str, manager: &'a str },
    /// A server-side apply: the object already carries its managed fields.
    Applied,
}

/// The typed writes of one field manager (a controller): the store's rules, recorded in
/// managedFields under `manager` (Update entries in the storage version).
pub struct ManagedBy<'s, S: Strategy> {
    store: &'s Store<S>,
    manager: &'s str,
}

impl<S: Strategy> Store<S> {
    /// The tracking of a typed write by `manager` (an Update entry in the storage version).
    pub(crate) fn tracking_for<'m>(&self, manager: &'m str) -> Tracking<'m> {
        Tracking::Update {
            version: self.strategy.info().storage_version,
            manager,
        }
    }

    /// Typed writes recorded for `manager` (e.g. `svm-apiserver-migrator`): nothing they do
    /// takes fields they do not change from the managers that set them.
    pub fn managed_by<'s>(&'s self, manager: &'s str) -> ManagedBy<'s, S> {
        ManagedBy {
            store: self,
            manager,
        }
    }
}

impl<S: Strategy> ManagedBy<'_, S> {
    fn tracking(&self) -> Tracking<'_> {
        self.store.tracking_for(self.manager)
    }

    /// Create `obj` (same rules as a REST create).
    pub async fn create(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.store
            .create_object(obj, false, Also::default(), self.tracking())
            .await
    }

    /// Replace an object (a REST update). Its resourceVersion is the precondition; its uid,
    /// when set, must match.
    pub async fn update(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.store
            .replace(obj, Subresource::Main, false, self.tracking())
            .await
            .map(|updated| updated.object)
    }

    /// Replace an object's status (`/status`): spec and most metadata stay as stored.
    pub async fn update_status(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.store
            .replace(obj, Subresource::Status, false, self.tracking())
            .await
            .map(|updated| updated.object)
    }
}

/// `error decoding YAML: ...` texts close to Go's yaml library (the same libyaml messages).
fn yaml_error(err: &serde_norway::Error) -> String {
    let text = err.to_string();
    let problem = text.split(" at line ").next().unwrap_or(&text).to_string();
    match err.location() {
        Some(location) => format!(
            "yaml: line {}: {problem}",
            location.line().saturating_sub(1).max(1)
        ),
        None => format!("yaml: {problem}"),
    }
}

/// Decode an apply body (YAML, or JSON, which is YAML). Duplicate keys are a 400 under
/// Strict (apply's default) and a warning under Warn, as upstream's strict YAML decoding.
pub(crate) fn decode_apply_body(
    body: &[u8],
    validation: FieldValidation,
) -> ApiResult<(Value, Vec<String>)> {
    let value: Value = serde_norway::from_slice(body).map_err(|e| {
        ApiError::BadRequest(format!(
            "error decoding YAML: error converting YAML to JSON: {}",
            yaml_error(&e)
        ))
    })?;
    let value = match value {
        Value::Object(_) => value,
        // An empty document decodes to an empty object, as in Go.
        Value::Null => Value::Object(Default::default()),
        other => {
            let kind = match other {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                _ => "bool",
            };
            return Err(ApiError::BadRequest(format!(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
            )));
        }
    };
    let mut warnings = Vec::new();
    if validation != FieldValidation::Ignore
        && let Err(err) = serde_norway::from_slice::<serde_norway::Value>(body)
    {
        let text = format!("error strict decoding YAML: {}", yaml_error(&err));
        match validation {
            FieldValidation::Strict => return Err(ApiError::BadRequest(text)),
            _ => warnings.push(text),
        }
    }
    Ok((value, warnings))
}

impl<S: Strategy> Store<S> {
    fn api_version_of(&self, version: &str) -> String {
        format!("{}/{version}", self.group())
    }

    /// The object as another served version serves it (through the hub, as the scheme's
    /// conversion does upstream).
    fn convert_versioned(&self, object: &Versioned, to: &str) -> Result<Versioned, String> {
        let prefix = format!("{}/", self.group());
        let from = object
            .api_version
            .strip_prefix(&prefix)
            .ok_or_else(|| format!("{} is not of group {}", object.api_version, self.group()))?;
        let to_version = to
            .strip_prefix(&prefix)
            .ok_or_else(|| format!("{to} is not of group {}", self.group()))?;
        let mut value = object.value.clone();
        strip_nulls(&mut value);
        let hub = self
            .strategy
            .decode(from, value)
            .map_err(|e| e.to_string())?;
        let value = self
            .strategy
            .encode(to_version, &hub)
            .map_err(|e| e.to_string())?;
        Ok(Versioned {
            value,
            api_version: to.to_string(),
        })
    }

    /// Record an Update by the tracked manager: `new` gets the managed fields it is to be
    /// stored with (`live` is the stored object, or the kind's empty object on create).
    pub(crate) fn track_update(
        &self,
        tracking: Tracking<'_>,
        subresource: Subresource,
        live: &S::Object,
        new: &mut S::Object,
    ) -> ApiResult<()> {
        let Tracking::Update { version, manager } = tracking else {
            return Ok(());
        };
        let live_json = self.strategy.encode(version, live)?;
        let mut new_json = self.strategy.encode(version, new)?;
        let api_version = self.api_version_of(version);
        let convert = |object: &Versioned, to: &str| self.convert_versioned(object, to);
        let write = Write {
            api_version: &api_version,
            subresource,
            manager,
            convert: &convert,
        };
        self.field_manager()
            .update(&write, &live_json, &mut new_json);
        new.metadata_mut().managed_fields = managed_fields_of(&new_json)?;
        Ok(())
    }

    /// What an apply of `config` makes of `current` (`None`: the object does not exist),
    /// with its managed fields.
    fn applied(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        config: &Value,
        current: Option<&S::Object>,
        opts: &WriteOptions,
    ) -> ApiResult<S::Object> {
        let empty = S::Object::default();
        let live = self.strategy.encode(version, current.unwrap_or(&empty))?;
        let api_version = self.api_version_of(version);
        let convert = |object: &Versioned, to: &str| self.convert_versioned(object, to);
        let manager = opts.field_manager.clone().unwrap_or_default();
        let write = Write {
            api_version: &api_version,
            subresource,
            manager: &manager,
            convert: &convert,
        };
        let mut new = self
            .field_manager()
            .apply(&write, &live, config, opts.force)?;
        self.place_in_namespace(at.namespace, &mut new)?;
        let name = at.name;
        let new_name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if new_name != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({new_name}) does not match the name on the URL ({name})"
            )));
        }
        // An empty resourceVersion in the configuration asks for no precondition.
        if let (Some(current), Some(rv)) = (current, new.pointer_mut("/metadata/resourceVersion"))
            && rv.as_str() == Some("")
        {
            *rv = Value::String(
                current
                    .metadata()
                    .resource_version
                    .clone()
                    .unwrap_or_default(),
            );
        }
        strip_nulls(&mut new);
        self.strategy.decode(version, new)
    }

    /// A server-side apply (`application/apply-patch+yaml`): update the object, or create it
    /// when it does not exist (the main resource only).
    pub(crate) async fn apply(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let (config, mut warnings) = decode_apply_body(body, opts.field_validation)?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let not_found = match self
                .apply_to_existing(version, at, subresource, &config, opts)
                .await
            {
                Ok(updated) => {
                    warnings.extend(updated.warnings);
                    return Ok(Written {
                        object: self.strategy.encode(version, &updated.object)?,
                        created: false,
                        warnings,
                    });
                }
                Err(err @ ApiError::NotFound { .. }) if subresource == Subresource::Main => err,
                Err(err) => return Err(err),
            };
            let obj = self.applied_for_create(version, at, subresource, &config, opts)?;
            match self
                .create_object(obj, opts.dry_run, Also::default(), Tracking::Applied)
                .await
            {
                Ok(created) => {
                    warnings.extend(self.strategy.warnings_on_create(&created));
                    return Ok(Written {
                        object: self.strategy.encode(version, &created)?,
                        created: true,
                        warnings,
                    });
                }
                // Created (or deleted) meanwhile: apply again to what is there now.
                Err(ApiError::AlreadyExists { .. }) if attempts < APPLY_ATTEMPTS => continue,
                Err(ApiError::AlreadyExists { .. }) => return Err(not_found),
                Err(other) => return Err(other),
            }
        }
    }

    /// Apply `config` to the object as it is stored; not found when there is none.
    async fn apply_to_existing(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        config: &Value,
        opts: &WriteOptions,
    ) -> ApiResult<Updated<S::Object>> {
        self.guaranteed_update_with(
            at,
            subresource,
            opts.dry_run,
            Also::default(),
            Tracking::Applied,
            |current| self.applied(version, at, subresource, config, Some(current), opts),
        )
        .await
    }

    /// The object an apply creates from `config` when none exists: a configuration naming a
    /// uid meant an object that is gone, a conflict.
    fn applied_for_create(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        config: &Value,
        opts: &WriteOptions,
    ) -> ApiResult<S::Object> {
        let mut obj = self.applied(version, at, subresource, config, None, opts)?;
        if let Some(uid) = obj.metadata().uid.clone().filter(|u| !u.is_empty()) {
            return Err(self.conflict(
                at.name,
                format!(
                    "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                ),
            ));
        }
        // A create by apply ignores the configuration's resourceVersion.
        obj.metadata_mut().resource_version = None;
        Ok(obj)
    }
}

/// The manager of a REST write: `fieldManager`, else the User-Agent's first segment.
pub(crate) fn request_manager(opts: &WriteOptions) -> String {
    manager_name(opts.field_manager.as_deref(), opts.user_agent.as_deref())
}

fn managed_fields_of(object: &Value) -> ApiResult<Option<Vec<ManagedFieldsEntry>>> {
    match object.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(None),
        Some(entries) => serde_json::from_value(entries.clone())
            .map(Some)
            .map_err(|e| ApiError::Internal(format!("encoding managedFields: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_bodies_are_yaml_or_json() {
        let (value, warnings) = decode_apply_body(
            b"apiVersion: v1\nkind: X\nmetadata:\n  name: a\n",
            FieldValidation::Strict,
        )
        .expect("yaml");
        assert_eq!(value["metadata"]["name"], "a");
        assert!(warnings.is_empty());
        let (value, _) = decode_apply_body(
            br#"{"kind": "X", "spec": {"a": 1}}"#,
            FieldValidation::Strict,
        )
        .expect("json");
        assert_eq!(value["spec"]["a"], 1);
    }

    #[test]
    fn malformed_yaml_is_a_400_like_upstream() {
        // Recording 18, step 14.
        let err = decode_apply_body(b"apiVersion: [unclosed\n", FieldValidation::Strict)
            .expect_err("malformed");
        assert_eq!(err.code(), 400);
        assert_eq!(
            err.to_string(),
            "error decoding YAML: error converting YAML to JSON: yaml: line 1: did not find expected ',' or ']'"
        );
        let err = decode_apply_body(b"- a\n- b\n", FieldValidation::Strict).expect_err("list");
        assert!(err.to_string().contains("cannot unmarshal array"));
    }

    #[test]
    fn duplicate_keys_fail_strict_and_warn_otherwise() {
        let body = b"kind: X\nkind: Y\n";
        let err = decode_apply_body(body, FieldValidation::Strict).expect_err("strict");
        assert!(
            err.to_string().starts_with("error strict decoding YAML"),
            "{err}"
        );
        let (value, warnings) = decode_apply_body(body, FieldValidation::Warn).expect("warn");
        assert_eq!(value["kind"], "Y");
        assert_eq!(warnings.len(), 1);
        let (_, warnings) = decode_apply_body(body, FieldValidation::Ignore).expect("ignore");
        assert!(warnings.is_empty());
    }
}

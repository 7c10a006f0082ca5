//! Writes: create, update (PUT), patch and delete, following `store.go` and etcd3's
//! `GuaranteedUpdate` — including the rule that a write whose bytes equal the stored bytes is
//! skipped (recording 08).

use serde_json::{Value, json};

use super::patch::ParsedPatch;
use super::{Current, Engine, Writer, parse_resource_version};
use crate::crd;
use crate::kinds;
use crate::negotiate::PatchType;
use crate::object::{self, ManagerWrite, meta_str, name_of, set_meta};
use crate::resources::{Flavor, GroupResource, ResourceDef};
use crate::route::object_key;
use crate::status::{ApiResult, Cause, StatusError};
use crate::store::{CommitError, Expect};

/// DeleteOptions.preconditions.
#[derive(Clone, Debug, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

#[derive(Debug)]
pub enum DeleteOutcome {
    /// Gone; the last state.
    Deleted(Value),
    /// Finalizers pending: deletionTimestamp set, object kept.
    Finalizing(Value),
}

/// What a conditional update decided.
enum Next {
    Write(Value),
    /// The update emptied the finalizers of an object being deleted: remove it.
    Delete(Value),
}

/// The result of a write.
#[derive(Debug)]
pub struct Written {
    pub obj: Value,
    pub created: bool,
    /// Nothing changed in storage (the bytes were identical).
    pub unchanged: bool,
}

/// How many times a conditional write re-reads after losing a race before giving up.
const MAX_UPDATE_ATTEMPTS: usize = 32;

impl Engine {
    /// `GuaranteedUpdate`: read, let `mutate` compute the next state, and commit it only if
    /// the key is still as read (else retry). When the new bytes equal the stored bytes —
    /// same content, same storage version, same encryption key — nothing is written and the
    /// resourceVersion stays (kube-apiserver's no-op rule, recording 08).
    fn guaranteed_update(
        &self,
        def: &ResourceDef,
        key: &str,
        dry_run: bool,
        mut mutate: impl FnMut(Option<&Current>) -> ApiResult<Next>,
    ) -> ApiResult<Written> {
        let gr = def.group_resource();
        let counter = gr.to_string();
        for _ in 0..MAX_UPDATE_ATTEMPTS {
            let current = self.current(def, key)?;
            let next = mutate(current.as_ref())?;
            let expect = current
                .as_ref()
                .map_or(Expect::Absent, |c| Expect::ModRev(c.entry.mod_rev));
            match next {
                Next::Delete(mut obj) => {
                    if dry_run {
                        return Ok(Written {
                            obj,
                            created: false,
                            unchanged: false,
                        });
                    }
                    match self.store.commit(&gr, key, expect, None) {
                        Ok(done) => {
                            self.metrics.write_performed(&counter);
                            set_meta(&mut obj, "resourceVersion", json!(done.rev.to_string()));
                            self.after_delete(def, &obj);
                            return Ok(Written {
                                obj,
                                created: false,
                                unchanged: false,
                            });
                        }
                        Err(_) => continue,
                    }
                }
                Next::Write(mut obj) => {
                    let stored = self.encode(def, &obj);
                    if let Some(cur) = &current
                        && cur.entry.value.bytes == stored.bytes
                    {
                        // A dry run counts neither way: it could not have written.
                        if !dry_run {
                            self.metrics.write_skipped(&counter);
                        }
                        return Ok(Written {
                            obj: cur.obj.clone(),
                            created: false,
                            unchanged: true,
                        });
                    }
                    if dry_run {
                        if let Some(cur) = &current {
                            set_meta(
                                &mut obj,
                                "resourceVersion",
                                json!(cur.entry.mod_rev.to_string()),
                            );
                        }
                        return Ok(Written {
                            obj,
                            created: current.is_none(),
                            unchanged: false,
                        });
                    }
                    match self.store.commit(&gr, key, expect, Some(stored)) {
                        Ok(done) => {
                            self.metrics.write_performed(&counter);
                            set_meta(&mut obj, "resourceVersion", json!(done.rev.to_string()));
                            self.after_write(def, &obj);
                            return Ok(Written {
                                obj,
                                created: current.is_none(),
                                unchanged: false,
                            });
                        }
                        Err(CommitError::Mismatch | CommitError::Missing) => continue,
                    }
                }
            }
        }
        Err(StatusError::conflict(
            def,
            key.rsplit('/').next().unwrap_or(key),
            "the object is being modified too often; please try again",
        ))
    }

    fn after_write(&self, def: &ResourceDef, obj: &Value) {
        if def.flavor == Flavor::CustomResourceDefinition {
            self.sync_crd(obj);
        }
    }

    fn after_delete(&self, def: &ResourceDef, obj: &Value) {
        if def.flavor == Flavor::CustomResourceDefinition {
            self.drop_crd(obj);
        }
    }

    /// Makes the catalogue serve what a CRD now says (versions, storage version, names).
    pub fn sync_crd(&self, crd_obj: &Value) {
        let gr = GroupResource::new(
            crd_obj["spec"]["group"].as_str().unwrap_or(""),
            crd_obj["spec"]["names"]["plural"].as_str().unwrap_or(""),
        );
        let key = self.catalog.get(&gr).and_then(|d| d.encryption_key.clone());
        if let Some(def) = crd::resource_def(crd_obj, key) {
            self.catalog.upsert(def);
        }
    }

    /// A deleted CRD takes its objects with it (the CRD finalizer's cleanup, done at once).
    fn drop_crd(&self, crd_obj: &Value) {
        let gr = GroupResource::new(
            crd_obj["spec"]["group"].as_str().unwrap_or(""),
            crd_obj["spec"]["names"]["plural"].as_str().unwrap_or(""),
        );
        for entry in self.store.current_entries(&gr) {
            let _ = self
                .store
                .commit(&gr, &entry.key, Expect::ModRev(entry.mod_rev), None);
        }
        self.catalog.remove(&gr);
    }

    /// Deleting a namespace deletes what lives in it (the namespace controller's job, done at
    /// once rather than through the Terminating phase).
    fn empty_namespace(&self, namespace: &str) {
        let prefix = format!("{namespace}/");
        for def in self.catalog.all() {
            if !def.namespaced || !def.is_stored() {
                continue;
            }
            let gr = def.group_resource();
            for entry in self.store.current_entries(&gr) {
                if entry.key.starts_with(&prefix) {
                    let _ = self
                        .store
                        .commit(&gr, &entry.key, Expect::ModRev(entry.mod_rev), None);
                    self.metrics.write_performed(&gr.to_string());
                }
            }
        }
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.store
            .get(&GroupResource::new("", "namespaces"), namespace)
            .is_some()
    }

    /// Checks a create/update body's apiVersion and kind against the endpoint (recording 16b),
    /// defaulting them for built-in types as the typed decoder does.
    pub fn check_body_type(
        &self,
        def: &ResourceDef,
        version: &str,
        body: &mut Value,
    ) -> ApiResult<()> {
        kinds::check_types(def, version, body)?;
        let expected_gv = def.group_version(version);
        let api_version = body["apiVersion"].as_str().unwrap_or("").to_string();
        let kind = body["kind"].as_str().unwrap_or("").to_string();
        if def.is_custom() {
            if kind.is_empty() {
                return Err(StatusError::bad_request(format!(
                    "Object 'Kind' is missing in '{}'",
                    truncated_json(body)
                )));
            }
            if api_version.is_empty() {
                return Err(StatusError::bad_request(format!(
                    "Object 'apiVersion' is missing in '{}'",
                    truncated_json(body)
                )));
            }
        }
        if !kind.is_empty() && kind != def.kind {
            let source_version = api_version.rsplit('/').next().unwrap_or(version);
            return Err(StatusError::bad_request(format!(
                "{kind} in version \"{source_version}\" cannot be handled as a {target}: converting ({source_version}.{kind}) to ({pkg}.{target}): unknown conversion",
                target = def.kind,
                pkg = internal_package(&def.group),
            )));
        }
        if !api_version.is_empty() && api_version != expected_gv {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({expected_gv})"
            )));
        }
        body["apiVersion"] = json!(expected_gv);
        body["kind"] = json!(def.kind);
        Ok(())
    }

    /// `BeforeCreate`: name, namespace, system fields, defaults, managedFields, validation.
    #[allow(clippy::too_many_arguments)]
    fn prepare_new(
        &self,
        def: &ResourceDef,
        version: &str,
        namespace: Option<&str>,
        mut obj: Value,
        writer: &Writer,
        operation: &str,
        applied: Option<&Value>,
    ) -> ApiResult<Value> {
        if name_of(&obj).is_empty()
            && let Some(prefix) = meta_str(&obj, "generateName").filter(|p| !p.is_empty())
        {
            let name = object::generate_name(prefix);
            set_meta(&mut obj, "name", json!(name));
        }
        match namespace {
            Some(ns) if def.namespaced => set_meta(&mut obj, "namespace", json!(ns)),
            _ => object::remove_meta(&mut obj, "namespace"),
        }
        set_meta(&mut obj, "uid", json!(uuid::Uuid::new_v4().to_string()));
        set_meta(&mut obj, "creationTimestamp", json!(object::now_rfc3339()));
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            object::remove_meta(&mut obj, field);
        }
        kinds::prepare_for_create(def, &mut obj);
        object::update_managed_fields(
            None,
            &mut obj,
            &ManagerWrite {
                manager: &writer.manager,
                operation,
                api_version: &def.group_version(version),
                subresource: None,
                applied,
                typed: !def.is_custom(),
            },
        );
        let causes = kinds::validate(def, &obj, None);
        if !causes.is_empty() {
            return Err(StatusError::invalid_object(def, name_of(&obj), causes));
        }
        if let Some(ns) = namespace
            && def.namespaced
            && !self.namespace_exists(ns)
        {
            // NamespaceLifecycle admission.
            return Err(StatusError::not_found_in("", "namespaces", ns));
        }
        Ok(obj)
    }

    /// POST: creates an object (recordings 16a, 17a, 17b).
    pub fn create(
        &self,
        def: &ResourceDef,
        version: &str,
        namespace: Option<&str>,
        mut body: Value,
        writer: &Writer,
    ) -> ApiResult<Value> {
        self.check_body_type(def, version, &mut body)?;
        if meta_str(&body, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(StatusError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if let (Some(ns), Some(body_ns)) = (namespace, meta_str(&body, "namespace"))
            && def.namespaced
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let obj = self.prepare_new(def, version, namespace, body, writer, "Update", None)?;
        let name = name_of(&obj).to_string();
        let key = object_key(namespace.filter(|_| def.namespaced), &name);
        let gr = def.group_resource();
        if writer.dry_run {
            if self.store.get(&gr, &key).is_some() {
                return Err(StatusError::already_exists(def, &name));
            }
            return Ok(obj);
        }
        let stored = self.encode(def, &obj);
        match self.store.commit(&gr, &key, Expect::Absent, Some(stored)) {
            Ok(done) => {
                self.metrics.write_performed(&gr.to_string());
                let mut obj = obj;
                set_meta(&mut obj, "resourceVersion", json!(done.rev.to_string()));
                self.after_write(def, &obj);
                Ok(obj)
            }
            Err(_) => Err(StatusError::already_exists(def, &name)),
        }
    }

    /// Server-side fields and rules every update applies (`BeforeUpdate` + the strategy).
    #[allow(clippy::too_many_arguments)]
    fn finish_update(
        &self,
        def: &ResourceDef,
        version: &str,
        old: &Value,
        new: &mut Value,
        subresource: Option<&str>,
        writer: &Writer,
        operation: &str,
        applied: Option<&Value>,
    ) -> ApiResult<()> {
        if meta_str(new, "uid").is_none_or(str::is_empty)
            && let Some(uid) = meta_str(old, "uid")
        {
            set_meta(new, "uid", json!(uid));
        }
        for field in [
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match object::metadata(old).and_then(|m| m.get(field)) {
                Some(v) => set_meta(new, field, v.clone()),
                None => object::remove_meta(new, field),
            }
        }
        for field in ["name", "namespace"] {
            match object::metadata(old).and_then(|m| m.get(field)) {
                Some(v) => set_meta(new, field, v.clone()),
                None => object::remove_meta(new, field),
            }
        }
        // Clients cannot rewrite managedFields here; the field manager recomputes them.
        match object::metadata(old).and_then(|m| m.get("managedFields")) {
            Some(v) => set_meta(new, "managedFields", v.clone()),
            None => object::remove_meta(new, "managedFields"),
        }
        kinds::prepare_for_update(def, old, new, subresource);
        object::update_managed_fields(
            Some(old),
            new,
            &ManagerWrite {
                manager: &writer.manager,
                operation,
                api_version: &def.group_version(version),
                subresource,
                applied,
                typed: !def.is_custom(),
            },
        );
        let causes = kinds::validate(def, new, Some(old));
        if !causes.is_empty() {
            return Err(StatusError::invalid_object(def, name_of(old), causes));
        }
        Ok(())
    }

    fn finished_or_write(obj: Value) -> Next {
        let deleting = meta_str(&obj, "deletionTimestamp").is_some();
        let finalizers_left = object::metadata(&obj)
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if deleting && !finalizers_left {
            Next::Delete(obj)
        } else {
            Next::Write(obj)
        }
    }

    /// PUT of an object or its /status.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        def: &ResourceDef,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        subresource: Option<&str>,
        writer: &Writer,
    ) -> ApiResult<Written> {
        self.check_body_type(def, version, &mut body)?;
        let body_name = name_of(&body).to_string();
        if body_name != name {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let (Some(ns), Some(body_ns)) = (namespace, meta_str(&body, "namespace"))
            && def.namespaced
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let body_rv = meta_str(&body, "resourceVersion")
            .filter(|s| !s.is_empty())
            .map(parse_resource_version)
            .transpose()?;
        let body_uid = meta_str(&body, "uid")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let key = object_key(namespace.filter(|_| def.namespaced), name);
        self.guaranteed_update(def, &key, writer.dry_run, |current| match current {
            None => {
                if subresource.is_some() || !def.allow_create_on_update || body_rv.is_some() {
                    return Err(StatusError::not_found(def, name));
                }
                let obj = self.prepare_new(def, version, namespace, body.clone(), writer, "Update", None)?;
                Ok(Next::Write(obj))
            }
            Some(cur) => {
                let cur_uid = meta_str(&cur.obj, "uid").unwrap_or("");
                if let Some(uid) = &body_uid
                    && uid != cur_uid
                {
                    // A uid in a PUT body is a precondition (rest.defaultUpdatedObjectInfo).
                    return Err(StatusError::conflict(
                        def,
                        name,
                        &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}"),
                    ));
                }
                match body_rv {
                    None if !def.allow_unconditional_update => {
                        return Err(StatusError::invalid_object(
                            def,
                            name,
                            vec![Cause::invalid(
                                "metadata.resourceVersion",
                                "0x0",
                                "must be specified for an update",
                            )],
                        ));
                    }
                    Some(rv) if rv != cur.entry.mod_rev => return Err(StatusError::stale(def, name)),
                    _ => {}
                }
                let mut new = body.clone();
                self.finish_update(def, version, &cur.obj, &mut new, subresource, writer, "Update", None)?;
                Ok(Self::finished_or_write(new))
            }
        })
    }

    /// PATCH of an object or its /status: json-patch, merge-patch, strategic-merge (built-in
    /// types only; treated as a merge-patch) and server-side apply (recordings 08, 09a-09e).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        def: &ResourceDef,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: &[u8],
        subresource: Option<&str>,
        writer: &Writer,
        explicit_field_manager: bool,
    ) -> ApiResult<Written> {
        if patch_type == PatchType::StrategicMerge && def.is_custom() {
            return Err(unsupported_patch());
        }
        let parsed = ParsedPatch::parse(patch_type, body)?;
        if let ParsedPatch::Apply(applied) = &parsed {
            if !explicit_field_manager {
                return Err(StatusError::invalid_options(
                    "PatchOptions",
                    vec![Cause::required(
                        "fieldManager",
                        "is required for apply patch",
                    )],
                ));
            }
            if applied["apiVersion"].as_str().is_none_or(str::is_empty)
                || applied["kind"].as_str().is_none_or(str::is_empty)
            {
                return Err(StatusError::bad_request(
                    "apiVersion and kind must be set in an apply patch",
                ));
            }
        }
        let operation = if patch_type == PatchType::Apply {
            "Apply"
        } else {
            "Update"
        };
        let key = object_key(namespace.filter(|_| def.namespaced), name);
        self.guaranteed_update(def, &key, writer.dry_run, |current| {
            let Some(cur) = current else {
                let ParsedPatch::Apply(applied) = &parsed else {
                    return Err(StatusError::not_found(def, name));
                };
                if subresource.is_some() {
                    return Err(StatusError::not_found(def, name));
                }
                if let Some(uid) = meta_str(applied, "uid").filter(|u| !u.is_empty()) {
                    return Err(StatusError::conflict(
                        def,
                        name,
                        &format!("uid mismatch: the provided object specified uid {uid}, and no existing object was found"),
                    ));
                }
                let mut obj = applied.clone();
                self.check_body_type(def, version, &mut obj)?;
                set_meta(&mut obj, "name", json!(name));
                object::remove_meta(&mut obj, "resourceVersion");
                let obj = self.prepare_new(def, version, namespace, obj, writer, operation, Some(applied))?;
                return Ok(Next::Write(obj));
            };
            let mut patched = cur.obj.clone();
            patched["apiVersion"] = json!(def.group_version(version));
            patched["kind"] = json!(def.kind);
            parsed.apply_to(&mut patched)?;
            kinds::check_types(def, version, &patched)?;
            match meta_str(&patched, "resourceVersion").filter(|s| !s.is_empty()) {
                Some(rv) if parse_resource_version(rv)? != cur.entry.mod_rev => {
                    return Err(StatusError::stale(def, name));
                }
                _ => {}
            }
            if name_of(&patched) != name {
                return Err(StatusError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    name_of(&patched)
                )));
            }
            let applied = match &parsed {
                ParsedPatch::Apply(a) => Some(a),
                _ => None,
            };
            self.finish_update(def, version, &cur.obj, &mut patched, subresource, writer, operation, applied)?;
            Ok(Self::finished_or_write(patched))
        })
    }

    /// DELETE of one object, honouring preconditions and finalizers.
    pub fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
        writer: &Writer,
    ) -> ApiResult<DeleteOutcome> {
        let key = object_key(namespace.filter(|_| def.namespaced), name);
        let gr = def.group_resource();
        for _ in 0..MAX_UPDATE_ATTEMPTS {
            let Some(cur) = self.current(def, &key)? else {
                return Err(StatusError::not_found(def, name));
            };
            let cur_uid = meta_str(&cur.obj, "uid").unwrap_or("").to_string();
            if let Some(uid) = pre.uid.as_deref().filter(|u| *u != cur_uid) {
                return Err(StatusError::conflict(
                    def,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}"
                    ),
                ));
            }
            let cur_rv = cur.entry.mod_rev.to_string();
            if let Some(rv) = pre.resource_version.as_deref().filter(|r| *r != cur_rv) {
                return Err(StatusError::conflict(
                    def,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {cur_rv}"
                    ),
                ));
            }
            let has_finalizers = object::metadata(&cur.obj)
                .and_then(|m| m.get("finalizers"))
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
            if has_finalizers {
                if meta_str(&cur.obj, "deletionTimestamp").is_some() {
                    return Ok(DeleteOutcome::Finalizing(cur.obj));
                }
                let mut marked = cur.obj.clone();
                set_meta(
                    &mut marked,
                    "deletionTimestamp",
                    json!(object::now_rfc3339()),
                );
                set_meta(&mut marked, "deletionGracePeriodSeconds", json!(0));
                if writer.dry_run {
                    return Ok(DeleteOutcome::Finalizing(marked));
                }
                let stored = self.encode(def, &marked);
                match self
                    .store
                    .commit(&gr, &key, Expect::ModRev(cur.entry.mod_rev), Some(stored))
                {
                    Ok(done) => {
                        self.metrics.write_performed(&gr.to_string());
                        set_meta(&mut marked, "resourceVersion", json!(done.rev.to_string()));
                        return Ok(DeleteOutcome::Finalizing(marked));
                    }
                    Err(_) => continue,
                }
            }
            if writer.dry_run {
                return Ok(DeleteOutcome::Deleted(cur.obj));
            }
            if def.flavor == Flavor::Namespace {
                self.empty_namespace(name);
            }
            match self
                .store
                .commit(&gr, &key, Expect::ModRev(cur.entry.mod_rev), None)
            {
                Ok(_) => {
                    self.metrics.write_performed(&gr.to_string());
                    self.after_delete(def, &cur.obj);
                    return Ok(DeleteOutcome::Deleted(cur.obj));
                }
                Err(_) => continue,
            }
        }
        Err(StatusError::conflict(
            def,
            name,
            "the object is being modified too often; please try again",
        ))
    }
}

/// The internal Go package kube-apiserver names in conversion errors.
fn internal_package(group: &str) -> &str {
    if group.is_empty() {
        "core"
    } else {
        group.split('.').next().unwrap_or(group)
    }
}

fn truncated_json(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        let mut cut = 80;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{} ...", &s[..cut])
    } else {
        s
    }
}

/// The 415 for patch types a resource does not take (recording 09d).
pub fn unsupported_patch() -> StatusError {
    StatusError::unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )
}

//! Who owns what after a write (structured-merge-diff's `merge.Updater`): an Update takes
//! the fields it changes from everyone else; an Apply owns exactly the fields of its
//! configuration, conflicts with other managers whose fields it would change (unless
//! forced), and removes what it applied before and applies no longer, unless another
//! manager still owns it. Every manager's ownership is compared in its own API version.

use std::collections::BTreeMap;

use serde_json::Value;

use super::fieldpath::{Path, Set};
use super::schema::TypedSchema;
use super::typed::{Comparison, Typed, render_errors};

/// How a manager wrote its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Operation {
    /// Server-side apply (`PATCH` with `application/apply-patch+yaml`).
    Apply,
    /// Any other write: a create, an update, a non-apply patch.
    Update,
}

/// A manager's identity: its name, operation and subresource, and for an Update also the
/// API version it wrote in (an applier is one manager whatever version it applies in).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ManagerId {
    /// The manager's name (`fieldManager`, or from the User-Agent).
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The `group/version` an updater wrote in; empty for an applier.
    pub api_version: String,
    /// The subresource written (`status`); empty for the main resource.
    pub subresource: String,
}

impl ManagerId {
    /// The identity of `manager`; an applier's API version is dropped (see the type).
    pub(crate) fn new(
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: &str,
    ) -> Self {
        let api_version = match operation {
            Operation::Apply => String::new(),
            Operation::Update => api_version.to_string(),
        };
        ManagerId {
            manager: manager.to_string(),
            operation,
            api_version,
            subresource: subresource.to_string(),
        }
    }

    /// How conflicts name a manager: `"alice"`, `"kubelet" with subresource "status"`,
    /// `"kubectl-edit" using v1 at <time>` for updaters.
    pub(crate) fn describe(&self, time: Option<&str>) -> String {
        let mut text = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            text = format!("{text} with subresource {:?}", self.subresource);
        }
        if self.operation == Operation::Update {
            text = match time {
                Some(time) => format!("{text} using {} at {time}", self.api_version),
                None => format!("{text} using {}", self.api_version),
            };
        }
        text
    }
}

/// A manager's fields, the API version their paths are in, and whether it applied them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionedSet {
    /// The field paths owned.
    pub set: Set,
    /// The `group/version` the paths are written in.
    pub api_version: String,
    /// Whether the manager applied them (an Apply entry) rather than updated them.
    pub applied: bool,
}

/// Every manager's fields, as `metadata.managedFields` holds them.
pub(crate) type ManagedFields = BTreeMap<ManagerId, VersionedSet>;

/// An object as one API version serves it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Versioned {
    /// The object as JSON.
    pub value: Value,
    /// `group/version`.
    pub api_version: String,
}

/// What the updater needs to know about the kind: its typed schema per API version,
/// conversion between versions, and the fields no manager may own (reset by the strategy).
pub(crate) trait Versions {
    /// `None`: the version is not served (its managers are dropped, as upstream does).
    fn schema(&self, api_version: &str) -> Option<&TypedSchema>;
    /// The object as `api_version` serves it.
    fn convert(&self, object: &Versioned, api_version: &str) -> Result<Versioned, String>;
    /// Fields the strategy resets in `api_version`: never owned, never compared.
    fn ignored(&self, api_version: &str) -> Option<&Set>;
}

/// Why an update of the managed fields failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum UpdateError {
    /// The apply would change fields these managers own.
    Conflicts(Vec<(ManagerId, Path)>),
    /// Anything else failed (no schema for a version, a conversion, a value the schema does not
    /// type); the write's managed fields are left as they were (or the apply fails).
    Internal(String),
}

/// What a write takes from the other managers.
#[derive(Default)]
struct Taken {
    /// Their fields the write modifies or adds.
    conflicts: Vec<(ManagerId, Set)>,
    /// Their fields the write removes.
    removed: Vec<(ManagerId, Set)>,
    /// Managers whose API version is no longer served.
    unserved: Vec<ManagerId>,
}

/// The conflicts error: every field of another manager that the write would change.
fn conflict_error(conflicts: &[(ManagerId, Set)]) -> UpdateError {
    let listed = conflicts
        .iter()
        .flat_map(|(id, set)| set.paths().into_iter().map(move |p| (id.clone(), p)))
        .collect();
    UpdateError::Conflicts(listed)
}

/// Computes the managers' ownership after an Update or an Apply.
pub(crate) struct Updater<'v> {
    /// The kind's schemas, conversion and reset fields.
    pub versions: &'v dyn Versions,
}

impl<'v> Updater<'v> {
    fn typed(&self, api_version: &str) -> Result<Typed<'v>, String> {
        self.versions
            .schema(api_version)
            .map(Typed::new)
            .ok_or_else(|| format!("no schema for {api_version}"))
    }

    /// `object` in `api_version`; `None` when that version is not served.
    fn convert(&self, object: &Versioned, api_version: &str) -> Result<Option<Versioned>, String> {
        if object.api_version == api_version {
            return Ok(Some(object.clone()));
        }
        if self.versions.schema(api_version).is_none() {
            return Ok(None);
        }
        self.versions.convert(object, api_version).map(Some)
    }

    fn filtered(&self, comparison: Comparison, api_version: &str) -> Comparison {
        match self.versions.ignored(api_version) {
            Some(ignored) => comparison.exclude(ignored),
            None => comparison,
        }
    }

    fn filter(&self, set: Set, api_version: &str) -> Set {
        match self.versions.ignored(api_version) {
            Some(ignored) => set.recursive_difference(ignored),
            None => set,
        }
    }

    /// Take what `new` changes from every manager but `workflow`: conflicts are the fields of
    /// other managers that `new` modifies or adds (an error unless `force`); fields `new`
    /// removes leave their owners. Returns the comparison in `api_version`.
    fn update(
        &self,
        old: &Versioned,
        new: &Versioned,
        managers: &mut ManagedFields,
        workflow: &ManagerId,
        force: bool,
    ) -> Result<Comparison, UpdateError> {
        let api_version = new.api_version.as_str();
        let compare = self.filtered(
            self.typed(api_version)
                .map_err(UpdateError::Internal)?
                .compare(&old.value, &new.value),
            api_version,
        );
        let taken = self.taken_from_others(old, new, managers, workflow, &compare)?;
        // Managers of versions no longer served are dropped, as upstream does.
        for id in taken.unserved {
            managers.remove(&id);
        }
        if !force && !taken.conflicts.is_empty() {
            return Err(conflict_error(&taken.conflicts));
        }
        for (id, set) in taken.conflicts.into_iter().chain(taken.removed) {
            if let Some(owned) = managers.get_mut(&id) {
                owned.set = owned.set.difference(&set);
            }
        }
        managers.retain(|_, owned| !owned.set.is_empty());
        Ok(compare)
    }

    /// What the change from `old` to `new` (`compare`, in `new`'s version) takes from every
    /// manager but `workflow`, each compared in the version its fields are in.
    fn taken_from_others(
        &self,
        old: &Versioned,
        new: &Versioned,
        managers: &ManagedFields,
        workflow: &ManagerId,
        compare: &Comparison,
    ) -> Result<Taken, UpdateError> {
        let mut by_version: BTreeMap<String, Comparison> = BTreeMap::new();
        by_version.insert(new.api_version.clone(), compare.clone());
        let mut taken = Taken::default();
        for (id, owned) in managers.iter() {
            if id == workflow {
                continue;
            }
            if !by_version.contains_key(&owned.api_version) {
                let Some(comparison) = self.compare_in(old, new, &owned.api_version)? else {
                    taken.unserved.push(id.clone());
                    continue;
                };
                by_version.insert(owned.api_version.clone(), comparison);
            }
            let Some(comparison) = by_version.get(&owned.api_version) else {
                continue;
            };
            let changed = comparison.modified.union(&comparison.added);
            let conflict = owned.set.intersection(&changed);
            if !conflict.is_empty() {
                taken.conflicts.push((id.clone(), conflict));
            }
            if !comparison.removed.is_empty() {
                taken.removed.push((id.clone(), comparison.removed.clone()));
            }
        }
        Ok(taken)
    }

    /// What changed from `old` to `new` as `api_version` serves them, without its ignored
    /// fields; `None` when that version is not served.
    fn compare_in(
        &self,
        old: &Versioned,
        new: &Versioned,
        api_version: &str,
    ) -> Result<Option<Comparison>, UpdateError> {
        let (Some(old_v), Some(new_v)) = (
            self.convert(old, api_version)
                .map_err(|e| UpdateError::Internal(format!("failed to convert old object: {e}")))?,
            self.convert(new, api_version)
                .map_err(|e| UpdateError::Internal(format!("failed to convert new object: {e}")))?,
        ) else {
            return Ok(None);
        };
        let typed = self.typed(api_version).map_err(UpdateError::Internal)?;
        let comparison = typed.compare(&old_v.value, &new_v.value);
        Ok(Some(self.filtered(comparison, api_version)))
    }

    /// A create, update or non-apply patch by `manager`: it owns what it changed, on top of
    /// what it owned before.
    pub(crate) fn update_fields(
        &self,
        live: &Versioned,
        new: &Versioned,
        managers: &mut ManagedFields,
        manager: &ManagerId,
    ) -> Result<(), String> {
        let compare = match self.update(live, new, managers, manager, true) {
            Ok(compare) => compare,
            Err(UpdateError::Internal(e)) => return Err(e),
            Err(UpdateError::Conflicts(_)) => return Err("unexpected conflicts".into()),
        };
        let previous = managers
            .get(manager)
            .map(|owned| owned.set.clone())
            .unwrap_or_default();
        let set = previous
            .difference(&compare.removed)
            .union(&compare.modified)
            .union(&compare.added);
        let set = self.filter(set, &new.api_version);
        if set.is_empty() {
            managers.remove(manager);
        } else {
            managers.insert(
                manager.clone(),
                VersionedSet {
                    set,
                    api_version: new.api_version.clone(),
                    applied: false,
                },
            );
        }
        Ok(())
    }

    /// An apply of `config` by `manager`. Returns the new object, or `None` when the apply
    /// changes nothing in the object (its managed fields may still change).
    pub(crate) fn apply(
        &self,
        live: &Versioned,
        config: &Versioned,
        managers: &mut ManagedFields,
        manager: &ManagerId,
        force: bool,
    ) -> Result<Option<Versioned>, UpdateError> {
        let api_version = config.api_version.as_str();
        let typed = self.typed(api_version).map_err(UpdateError::Internal)?;
        let merged = typed.merge(&live.value, &config.value).map_err(|errors| {
            UpdateError::Internal(format!(
                "failed to merge config: {}",
                render_errors(&errors)
            ))
        })?;
        let new = Versioned {
            value: merged,
            api_version: api_version.to_string(),
        };
        let last = managers.get(manager).cloned();
        let set = self.filter(typed.to_field_set(&config.value), api_version);
        managers.insert(
            manager.clone(),
            VersionedSet {
                set,
                api_version: api_version.to_string(),
                applied: true,
            },
        );
        let new = self
            .prune(new, managers, manager, last.as_ref())
            .map_err(|e| UpdateError::Internal(format!("failed to prune fields: {e}")))?;
        self.update(live, &new, managers, manager, force)?;
        if new.api_version == live.api_version
            && super::fieldpath::values_equal(&new.value, &live.value)
        {
            return Ok(None);
        }
        Ok(Some(new))
    }

    /// Remove what `manager` applied last time and not this time, unless another manager
    /// owns it.
    fn prune(
        &self,
        merged: Versioned,
        managers: &ManagedFields,
        manager: &ManagerId,
        last: Option<&VersionedSet>,
    ) -> Result<Versioned, String> {
        let Some(last) = last.filter(|l| !l.set.is_empty()) else {
            return Ok(merged);
        };
        let Some(converted) = self.convert(&merged, &last.api_version)? else {
            return Ok(merged);
        };
        let typed = self.typed(&last.api_version)?;
        let pruned = Versioned {
            value: typed.remove_items(
                &converted.value,
                &typed.ensure_named_fields_are_members(&last.set),
            ),
            api_version: last.api_version.clone(),
        };
        let pruned = self.add_back_owned_items(&converted, pruned, managers)?;
        let pruned = self.add_back_dangling_items(&converted, &pruned, last)?;
        let target = managers
            .get(manager)
            .map(|m| m.api_version.clone())
            .unwrap_or_else(|| merged.api_version.clone());
        Ok(self.convert(&pruned, &target)?.unwrap_or(pruned))
    }

    /// Put back what pruning removed but some manager (or the new configuration) owns.
    fn add_back_owned_items(
        &self,
        merged: &Versioned,
        mut pruned: Versioned,
        managers: &ManagedFields,
    ) -> Result<Versioned, String> {
        let mut by_version: BTreeMap<String, Set> = BTreeMap::new();
        for owned in managers.values() {
            let entry = by_version.entry(owned.api_version.clone()).or_default();
            *entry = entry.union(&owned.set);
        }
        // The pruned version first: conversion may need what pruning took.
        let mut order: Vec<String> = Vec::new();
        if by_version.contains_key(&pruned.api_version) {
            order.push(pruned.api_version.clone());
        }
        order.extend(
            by_version
                .keys()
                .filter(|v| **v != pruned.api_version)
                .cloned(),
        );
        let mut merged = merged.clone();
        for api_version in order {
            let Some(managed) = by_version.get(&api_version) else {
                continue;
            };
            let (Some(m), Some(p)) = (
                self.convert(&merged, &api_version)?,
                self.convert(&pruned, &api_version)?,
            ) else {
                continue;
            };
            let typed = self.typed(&api_version)?;
            let merged_set = typed.ensure_named_fields_are_members(&typed.to_field_set(&m.value));
            let pruned_set = typed.ensure_named_fields_are_members(&typed.to_field_set(&p.value));
            let keep = pruned_set.union(&typed.ensure_named_fields_are_members(managed));
            pruned = Versioned {
                value: typed.remove_items(&m.value, &merged_set.difference(&keep)),
                api_version: api_version.clone(),
            };
            merged = m;
        }
        Ok(pruned)
    }

    /// Put back what pruning removed that the applier did not own last time (unowned fields,
    /// or fields of updaters).
    fn add_back_dangling_items(
        &self,
        merged: &Versioned,
        pruned: &Versioned,
        last: &VersionedSet,
    ) -> Result<Versioned, String> {
        let Some(pruned) = self.convert(pruned, &last.api_version)? else {
            return Ok(merged.clone());
        };
        let typed = self.typed(&last.api_version)?;
        let pruned_set = typed.ensure_named_fields_are_members(&typed.to_field_set(&pruned.value));
        let merged_set = typed.ensure_named_fields_are_members(&typed.to_field_set(&merged.value));
        let last_set = typed.ensure_named_fields_are_members(&last.set);
        Ok(Versioned {
            value: typed.remove_items(
                &merged.value,
                &merged_set.difference(&pruned_set).intersection(&last_set),
            ),
            api_version: last.api_version.clone(),
        })
    }
}

//! Test-only stopping points of the StatefulSet re-create, for the crash test
//! (`tests/real_cluster/volumes/crashes.rs`), read once from [`VARIABLE`] when the controller
//! starts.
//!
//! Compiled only with the `test-hooks` feature, which only test builds turn on (the
//! workspace's dev-dependencies); the product is built with `hooks_off.rs` in its place, the
//! same calls doing nothing, so a shipped binary reads no such variable and has no hook to
//! fire, whatever its environment says.
//!
//! The value is comma-separated `<namespace>/<name>=<hook>`, each hook for one migration and
//! firing once per process:
//!
//! - `halt-after-save`, `halt-after-delete`, `halt-after-create`: right after that step's write
//!   succeeded (the status write that saved the manifest, the StatefulSet's deletion, its
//!   creation) the controller stops acting on that migration for the rest of the process's life
//!   — no status write, no Event, no finalizer change — as if the process had died right there;
//!   the test then kills it with SIGKILL and starts it again without the hook. Other migrations
//!   go on.
//! - `wait-for-edit-before-delete`: the StatefulSet's deletion, once decided and right before
//!   it is sent, waits until the StatefulSet's resourceVersion is no longer the one the
//!   manifest was saved from (the test edits it), then is sent as decided: the race that the
//!   deletion's resourceVersion precondition is there for, made certain. The wait ends with the
//!   term, and after [`EDIT_WAIT_LIMIT`] at the latest.
//!
//! Each hook logs a line starting `test hook:` when it fires, which the test waits for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use svm_api::volumes::VolumeClaimMigration;
use svm_cluster::ClusterClient;
use tokio_util::sync::CancellationToken;

use crate::key::Key;
use crate::target;

/// The environment variable the hooks are read from.
const VARIABLE: &str = "SVM_TEST_VOLUME_HOOKS";

/// How long `wait-for-edit-before-delete` waits at most.
const EDIT_WAIT_LIMIT: Duration = Duration::from_secs(120);

/// One migration's hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    HaltAfterSave,
    HaltAfterDelete,
    HaltAfterCreate,
    WaitForEditBeforeDelete,
}

impl Hook {
    fn parse(text: &str) -> Option<Hook> {
        match text {
            "halt-after-save" => Some(Hook::HaltAfterSave),
            "halt-after-delete" => Some(Hook::HaltAfterDelete),
            "halt-after-create" => Some(Hook::HaltAfterCreate),
            "wait-for-edit-before-delete" => Some(Hook::WaitForEditBeforeDelete),
            _ => None,
        }
    }
}

/// A write of the re-create after which a hook may halt its migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The status write that saved the StatefulSet's manifest.
    Save,
    /// The StatefulSet's deletion.
    Delete,
    /// Its creation from the saved manifest.
    Create,
}

/// The hooks still to fire, and the migrations halted.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    pending: BTreeMap<Key, Hook>,
    halted: BTreeSet<Key>,
}

impl Hooks {
    /// From [`VARIABLE`]; none when it is unset.
    pub(crate) fn from_env() -> Hooks {
        match std::env::var(VARIABLE) {
            Ok(text) => Hooks::parse(&text),
            Err(_) => Hooks::default(),
        }
    }

    fn parse(text: &str) -> Hooks {
        let mut hooks = Hooks::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let parsed = item.split_once('=').and_then(|(key, hook)| {
                let (namespace, name) = key.split_once('/')?;
                Some((
                    (namespace.to_string(), name.to_string()),
                    Hook::parse(hook)?,
                ))
            });
            match parsed {
                Some((key, hook)) => {
                    tracing::warn!(variable = VARIABLE, migration = ?key, ?hook, "test hook set");
                    hooks.pending.insert(key, hook);
                }
                None => tracing::warn!(
                    variable = VARIABLE,
                    item,
                    "test hook not understood (expected <namespace>/<name>=<hook>); ignored"
                ),
            }
        }
        hooks
    }

    /// Whether `key` was halted: the controller no longer acts on it in this process.
    pub(crate) fn is_halted(&self, key: &Key) -> bool {
        self.halted.contains(key)
    }

    /// Called right after `step`'s write for `key` succeeded: whether its hook halts it there.
    /// If so the hook is spent, `key` is halted, and the line the test waits for is logged.
    pub(crate) fn halted_after(&mut self, key: &Key, step: Step) -> bool {
        let hook = match step {
            Step::Save => Hook::HaltAfterSave,
            Step::Delete => Hook::HaltAfterDelete,
            Step::Create => Hook::HaltAfterCreate,
        };
        if self.pending.get(key) != Some(&hook) {
            return false;
        }
        self.pending.remove(key);
        self.halted.insert(key.clone());
        match step {
            Step::Save => tracing::warn!("test hook: halted after save"),
            Step::Delete => tracing::warn!("test hook: halted after delete"),
            Step::Create => tracing::warn!("test hook: halted after create"),
        }
        true
    }

    /// Called right before the StatefulSet's deletion, decided from the manifest saved at
    /// resourceVersion `saved`: with `key`'s hook `wait-for-edit-before-delete`, waits until
    /// the StatefulSet is no longer at `saved` (or is gone), `term` ends, or
    /// [`EDIT_WAIT_LIMIT`]; the hook is then spent and the deletion goes as decided.
    pub(crate) async fn wait_for_edit_before_delete(
        &mut self,
        key: &Key,
        cluster: &ClusterClient,
        vcm: &VolumeClaimMigration,
        saved: &str,
        term: &CancellationToken,
    ) {
        if self.pending.get(key) != Some(&Hook::WaitForEditBeforeDelete) {
            return;
        }
        self.pending.remove(key);
        tracing::warn!(
            resource_version = saved,
            "test hook: waiting for an edit of the StatefulSet before deleting it"
        );
        let changed = tokio::time::timeout(EDIT_WAIT_LIMIT, async {
            loop {
                match target::statefulset_resource_version(cluster, vcm).await {
                    Ok(Some(now)) if now != saved => return Some(now),
                    Ok(None) => return None,
                    _ => {}
                }
                tokio::select! {
                    () = term.cancelled() => return None,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        })
        .await;
        tracing::warn!(
            saved,
            now = ?changed,
            "test hook: done waiting; deleting the StatefulSet as decided"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> Key {
        (namespace.into(), name.into())
    }

    #[test]
    fn hooks_name_one_migration_each_and_fire_once() {
        let mut hooks = Hooks::parse(
            "a/grow=halt-after-save, b/grow=wait-for-edit-before-delete,c=halt-after-create,\
             d/grow=explode,e/grow=halt-after-delete",
        );
        assert_eq!(
            hooks.pending.get(&key("b", "grow")),
            Some(&Hook::WaitForEditBeforeDelete)
        );
        assert!(
            !hooks.pending.contains_key(&key("c", "")),
            "no namespace/name"
        );
        assert!(
            !hooks.pending.contains_key(&key("d", "grow")),
            "unknown hook"
        );
        // A halt fires after its own step only, once, and halts its migration alone.
        assert!(!hooks.halted_after(&key("a", "grow"), Step::Delete));
        assert!(!hooks.halted_after(&key("e", "grow"), Step::Save));
        assert!(!hooks.is_halted(&key("a", "grow")));
        assert!(hooks.halted_after(&key("a", "grow"), Step::Save));
        assert!(hooks.is_halted(&key("a", "grow")));
        assert!(!hooks.halted_after(&key("a", "grow"), Step::Save), "spent");
        assert!(!hooks.is_halted(&key("e", "grow")));
        assert!(hooks.halted_after(&key("e", "grow"), Step::Delete));
        assert!(!hooks.halted_after(&key("b", "grow"), Step::Create));
        assert!(Hooks::parse("").pending.is_empty());
    }
}

//! Test-only stopping points of the StatefulSet re-create, for the crash test
//! (`tests/real_cluster/volumes/crashes.rs`), read once from [`VARIABLE`] when the controller
//! starts. Production never sets it: then there are none and nothing here acts.
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
//! Harmless in production even if set by mistake: a hook names single migrations, a halt only
//! stops this process acting on one of them until it restarts (its state is in the status, so
//! the next process goes on), and the wait is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::key::Key;

/// The environment variable the hooks are read from.
pub(super) const VARIABLE: &str = "SVM_TEST_VOLUME_HOOKS";

/// How long `wait-for-edit-before-delete` waits at most.
pub(super) const EDIT_WAIT_LIMIT: Duration = Duration::from_secs(120);

/// One migration's hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hook {
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

/// What a pass reports about its migration's hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fired {
    /// The hook acted and is spent; the migration goes on.
    Once,
    /// Stop acting on the migration in this process.
    Halt,
}

/// The hooks still to fire, and the migrations halted.
#[derive(Debug, Default)]
pub(super) struct Hooks {
    pending: BTreeMap<Key, Hook>,
    halted: BTreeSet<Key>,
}

impl Hooks {
    /// From [`VARIABLE`]; none when it is unset.
    pub(super) fn from_env() -> Hooks {
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
                    tracing::warn!(variable = VARIABLE, migration = ?key, ?hook, "test hook set (test-only; never set in production)");
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

    /// The hook still to fire for `key`.
    pub(super) fn pending(&self, key: &Key) -> Option<Hook> {
        self.pending.get(key).copied()
    }

    /// Whether `key` was halted.
    pub(super) fn is_halted(&self, key: &Key) -> bool {
        self.halted.contains(key)
    }

    /// `key`'s hook fired.
    pub(super) fn fired(&mut self, key: &Key, fired: Fired) {
        self.pending.remove(key);
        if fired == Fired::Halt {
            self.halted.insert(key.clone());
        }
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
             d/grow=explode",
        );
        assert_eq!(hooks.pending(&key("a", "grow")), Some(Hook::HaltAfterSave));
        assert_eq!(
            hooks.pending(&key("b", "grow")),
            Some(Hook::WaitForEditBeforeDelete)
        );
        assert_eq!(hooks.pending(&key("c", "")), None, "no namespace/name");
        assert_eq!(hooks.pending(&key("d", "grow")), None, "unknown hook");
        hooks.fired(&key("b", "grow"), Fired::Once);
        assert_eq!(hooks.pending(&key("b", "grow")), None);
        assert!(!hooks.is_halted(&key("b", "grow")));
        hooks.fired(&key("a", "grow"), Fired::Halt);
        assert!(hooks.is_halted(&key("a", "grow")));
        assert_eq!(hooks.pending(&key("a", "grow")), None);
        assert!(Hooks::parse("").pending.is_empty());
    }
}

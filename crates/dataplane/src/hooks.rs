//! Test-only stopping points for the crash test (`tests/real_cluster/data_plane/crashes.rs`),
//! read once from [`VARIABLE`] when the controller starts.
//!
//! Compiled only with the `test-hooks` feature, which only test builds turn on; the product is
//! built with `hooks_off.rs` in its place, the same calls doing nothing
//! (`hack/no-test-hooks.sh` refuses a binary carrying [`VARIABLE`]).
//!
//! The value is comma-separated `<namespace>/<name>=<hook>`: `halt-after-cordon` or
//! `halt-after-evict`. Right after that write to the cluster succeeded, the controller stops
//! acting on that rollout for the rest of the process's life — no status write, no Event —
//! as if the process had died right there; the test then kills it with SIGKILL and starts it
//! again without the hook. Each hook logs a line starting `test hook:` when it fires.

use std::collections::{BTreeMap, BTreeSet};

/// The environment variable the hooks are read from.
const VARIABLE: &str = "SVM_TEST_DATA_PLANE_HOOKS";

/// Where a hook stops a rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// After a node was cordoned.
    Cordon,
    /// After a data-plane pod's eviction was accepted.
    Evict,
}

/// The hooks of one process.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    armed: BTreeMap<String, Step>,
    halted: BTreeSet<String>,
}

impl Hooks {
    /// The hooks [`VARIABLE`] asks for.
    pub(crate) fn from_env() -> Self {
        let mut armed = BTreeMap::new();
        for entry in std::env::var(VARIABLE).unwrap_or_default().split(',') {
            let Some((key, hook)) = entry.trim().split_once('=') else {
                continue;
            };
            let step = match hook {
                "halt-after-cordon" => Step::Cordon,
                "halt-after-evict" => Step::Evict,
                other => {
                    tracing::warn!(hook = other, "test hook: unknown hook ignored");
                    continue;
                }
            };
            armed.insert(key.to_string(), step);
        }
        Self {
            armed,
            halted: BTreeSet::new(),
        }
    }

    /// Whether the rollout `key` (`namespace/name`) was halted.
    pub(crate) fn is_halted(&self, key: &str) -> bool {
        self.halted.contains(key)
    }

    /// Called after `step` succeeded for `key`: true (and halted from now on) when armed.
    pub(crate) fn halted_after(&mut self, key: &str, step: Step) -> bool {
        if self.armed.get(key) != Some(&step) {
            return false;
        }
        self.armed.remove(key);
        self.halted.insert(key.to_string());
        tracing::warn!(rollout = key, ?step, "test hook: halted after {step:?}");
        true
    }
}

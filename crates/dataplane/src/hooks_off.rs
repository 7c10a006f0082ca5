//! The product's stand-in for `hooks.rs`: the same calls, doing nothing (no variable read).

/// Where a hook would stop a rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// After a node was cordoned.
    Cordon,
    /// After a data-plane pod's eviction was accepted.
    Evict,
}

/// No hooks.
#[derive(Debug, Default)]
pub(crate) struct Hooks;

impl Hooks {
    pub(crate) fn from_env() -> Self {
        Self
    }

    pub(crate) fn is_halted(&self, _key: &str) -> bool {
        false
    }

    pub(crate) fn halted_after(&mut self, _key: &str, _step: Step) -> bool {
        false
    }
}

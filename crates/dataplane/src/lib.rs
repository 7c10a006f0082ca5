//! The DataPlaneRollout controller (alpha; `--enable-data-plane-rollouts`): a storage data
//! plane's DaemonSet upgraded one node at a time, each node gated on every volume with a
//! replica there keeping enough healthy replicas on other nodes.
//!
//! Built so far, both pure and unit-tested: the replica guards ([`guards`]), the check at the
//! heart of each node's preflight and rebuild, and the per-node state machine ([`plan`]). The
//! cluster side (reading, cordon, eviction, claims, Events) and the term's wiring come next
//! (issue 39).

pub mod guards;
pub mod plan;
#[cfg(test)]
mod testing;

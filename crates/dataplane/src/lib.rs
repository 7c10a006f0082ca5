//! The DataPlaneRollout controller (alpha; `--enable-data-plane-rollouts`): a storage data
//! plane's DaemonSet upgraded one node at a time, each node gated on every volume with a
//! replica there keeping enough healthy replicas on other nodes.
//!
//! Built so far, both pure and unit-tested: the replica guards ([`guards`]), the check at the
//! heart of each node's preflight and rebuild, the per-node state machine ([`plan`]), and the
//! reading of Nodes, pods and ControllerRevisions into what it needs ([`read`]). The cluster
//! calls (lists and watches, cordon, eviction, claims, Events) and the term's wiring come next
//! (issue 39).

pub mod guards;
pub mod plan;
pub mod read;
#[cfg(test)]
mod testing;

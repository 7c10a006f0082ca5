//! The DataPlaneRollout controller (alpha; `--enable-data-plane-rollouts`): a storage data
//! plane's DaemonSet upgraded one node at a time, each node gated on every volume with a
//! replica there keeping enough healthy replicas on other nodes.
//!
//! Built so far: the replica guards ([`guards`]), the pure check at the heart of each node's
//! preflight and rebuild. The per-node state machine, the cluster side (cordon, eviction,
//! waits) and the term's wiring come next (issue 39).

pub mod guards;

//! What every controller shares, and nothing one controller owns: leader election among the
//! replicas ([`leader`]), the leader's metrics ([`leader_metrics`]), Kubernetes Events
//! ([`events`]), the reader of kube-apiserver's `/metrics` ([`prometheus`]), and, for the
//! controllers' own tests, a played target cluster ([`testing`]). The controllers (the
//! trigger, the migrator, the volume controller, the API modes) are crates above this one;
//! `svm-controllers` wires them into a leadership term.

pub mod events;
pub mod leader;
pub mod leader_metrics;
pub mod prometheus;
#[cfg(feature = "testing")]
pub mod testing;

/// Where the README explains the API modes (this server or the cluster serving
/// storagemigration.k8s.io); errors and conditions about them point there.
pub const API_MODES_DOCS: &str = "README.md#clusters-that-serve-storagemigrationk8sio-themselves";

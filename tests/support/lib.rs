//! What the integration test targets and the benchmarks share (`svm-test-support`, a
//! dev-dependency of the binary): servers on free loopback ports, kubectl, fixtures.
// Test support, not a layer: its helpers are documented where their use is not plain.
#![allow(missing_docs)]

pub mod audit;
pub mod control_plane;
pub mod controller_manager;
pub mod doubles;
pub mod edge_client;
pub mod etcd;
pub mod fixtures;
pub mod harness;
pub mod kubectl;
pub mod monitoring;
pub mod protobuf_fields;
pub mod real_cluster;
pub mod recordings;
pub mod seed;
pub mod server;
pub mod stats;
pub mod wait;
pub mod watch_load;
pub mod webhook;

use std::path::{Path, PathBuf};

/// The repository's root (this crate lives in `tests/support`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `svm-apiserver` binary cargo built for the test or benchmark running now: beside the
/// running executable's `deps/` directory (cargo builds a package's binaries before its
/// integration tests and benchmarks), or `SVM_APISERVER_BIN` when set.
pub fn svm_apiserver_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SVM_APISERVER_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the running test's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test executable under target/<profile>/deps");
    let binary = profile_dir.join("svm-apiserver");
    assert!(
        binary.is_file(),
        "{} is missing: run the tests through cargo, which builds it first",
        binary.display()
    );
    binary
}

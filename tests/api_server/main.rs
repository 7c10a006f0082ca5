//! Integration tests of the API server: the real binary over real HTTPS, on both stores (a real
//! etcd on a free loopback port, and the embedded store), driven by the real kubectl 1.37 and by
//! plain HTTP clients.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;
use svm_test_support::{protobuf_fields, recordings};

mod authn;
mod bad_input;
mod data_plane;
mod delegated;
mod front_proxy;
mod kubectl_apply;
mod kubectl_conformance;
mod namespaced;
mod old_names;
mod protobuf;
mod protobuf_recordings;
mod python_client;
mod server_side_apply;
mod watch;

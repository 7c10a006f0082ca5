//! The real-cluster suite: svm-apiserver on a real kube-apiserver (envtest's, from
//! `KUBEBUILDER_ASSETS`) and a real etcd, installed as `deploy/` installs it and driven through
//! the real aggregator. What the test double cannot vouch for — the wire format, RBAC, the
//! aggregation layer, encryption at rest, storage versions — is checked here against the real
//! thing.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;
use svm_test_support::protobuf_fields;

mod auth;
mod builtin_storage_move;
mod companion;
mod crashes;
mod crd_storage_move;
mod data_plane;
mod encryption;
mod etcd_members;
mod fidelity;
mod first_start;
mod flow_control;
mod hooked;
mod in_tree_migrator;
mod ksvm_import;
mod named_failures;
mod no_op_write;
mod preflight;
mod volumes;
mod world;

//! svm-apiserver: a Kubernetes aggregated API server for storage version migration.
#![forbid(unsafe_code)]

pub mod api;
pub(crate) mod apimode;
pub mod auth;
pub mod cluster;
pub mod controller;
pub mod flags;
pub mod ksvm;
pub(crate) mod migrator;
pub mod registry;
pub mod server;
pub mod storage;
pub mod trigger;
pub(crate) mod volumes;

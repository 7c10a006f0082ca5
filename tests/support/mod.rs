//! Shared helpers of the integration test binaries (each includes this module).
#![allow(dead_code)]

pub mod audit;
pub mod control_plane;
pub mod controller_manager;
pub mod doubles;
pub mod etcd;
pub mod kubectl;
pub mod monitoring;
pub mod real_cluster;
pub mod seed;
pub mod server;

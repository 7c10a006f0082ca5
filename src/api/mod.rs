//! The `storagemigration.k8s.io` types: one internal (hub) form per kind, the served versions
//! with lossless conversion, defaulting, validation, schemas and strategies. (Being written.)

pub const GROUP: &str = "storagemigration.k8s.io";

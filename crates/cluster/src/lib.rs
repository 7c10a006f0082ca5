//! The target cluster: a client for its kube-apiserver, discovery, and the metadata-only LIST and
//! precondition PATCH the migrator is made of (docs/design.md, "Metadata-only reads and the no-op
//! PATCH").

pub mod access;
pub(crate) mod builtin;
pub(crate) mod client;
pub(crate) mod error;
pub mod objects;
pub mod refusal;
pub mod resources;
pub mod watches;
pub mod wire;

pub use access::NotCatalogued;
pub use builtin::BuiltinMigrations;
pub use client::{ClusterClient, WireFormat};
pub use error::{ClusterError, ConfigCause};
pub use objects::{MetadataPage, ObjectRef, Touched};
pub use resources::{ResolveError, ResolvedResource};

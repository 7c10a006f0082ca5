//! A kube-apiserver test double for svm-apiserver's migrator and trigger tests.
//!
//! No kube-apiserver can be installed where these tests run, so this crate stands in for one:
//! real HTTP(S) on a loopback port, usable in-process ([`KubeDouble`]) or as its own process
//! (the `kube-double` binary, for benchmarks). It follows kube-apiserver v1.36.2 as recorded
//! in `tests/fixtures/recordings/` (file numbers in brackets below). What it fakes,
//! and the upstream behaviour each part follows:
//!
//! - **Discovery** (`discovery`): `/api`, `/apis`, `/apis/<g>`, `/api/v1`, `/apis/<g>/<v>`
//!   with `storageVersionHash` = base64(sha256("<group>/<version>/<kind>")[..8]) of the
//!   storage version [01, 03a, 03b]; aggregated discovery v2 with a quoted SHA-512 ETag,
//!   `If-None-Match` → 304, a v2beta1 Accept falling back to the legacy list [02a, 02b].
//! - **Resources** (`resources`): configmaps, secrets, namespaces, apps/deployments,
//!   coordination leases, CRDs (apiextensions.k8s.io/v1, `/status`, append-only
//!   `storedVersions` [11]) and the custom resources they define, TokenReview and
//!   SubjectAccessReview [15a, 15b], internal.apiserver.k8s.io StorageVersions [13],
//!   apiregistration.k8s.io APIServices (stored as written: no aggregator registers local
//!   ones, so a test writes what its cluster would show).
//! - **Storage** (`store`): one etcd-like revision counter (resourceVersion = mod revision),
//!   per-key history for consistent paged snapshots, compaction, and per-object stored bytes
//!   in the storage version under an optional `k8s:enc:aescbc:v1:<key>:` envelope; a test
//!   reads back each object's encoding and key like `etcdctl get` [08].
//! - **LIST** (`engine::Engine::list`): limit/continue with upstream tokens, remainingItemCount,
//!   resourceVersion / resourceVersionMatch, 410 Expired with an inconsistent (rv -1)
//!   continue token after compaction [04, 04b, 05]; label and field selectors [12];
//!   metadata-only lists and gets (`as=PartialObjectMetadata[List]`) and their mismatch
//!   errors [06].
//! - **Writes** (`engine`): GET/PUT/PATCH (merge, json, strategic-as-merge for built-ins,
//!   apply) with resourceVersion preconditions (409), uid preconditions (PUT: 409; in a
//!   patch: 422 "field is immutable" twice; SSA on a missing object: 409 uid mismatch), 404
//!   for missing objects, 415 for strategic-merge on CRs [09a-09e]; a write whose bytes equal
//!   the stored bytes is skipped with no new resourceVersion, while an object in an old
//!   encoding or under an old key is rewritten [08, 09e]; create with generateName, dryRun,
//!   validation 422s and decode 400s [16a, 16b, 17a, 17b].
//! - **WATCH** (`watch`): replay from a resourceVersion, 410 ERROR events on compacted ones,
//!   legacy synthetic ADDED, watch-list with the `k8s.io/initial-events-end` bookmark, closing
//!   bookmarks, 422 for invalid option combinations [10a, 10b].
//! - **Protobuf** (`protobuf`): `application/vnd.kubernetes.protobuf` where kube-apiserver
//!   answers client-go in it — the PartialObjectMetadata(List) forms of every resource,
//!   ConfigMaps, Statuses, watch frames, DeleteOptions bodies [20a-20d, 20g, 20h].
//! - **Apiservers** (`apiservers`): identity leases in kube-system (new uid and holder on
//!   restart [12]), StorageVersion objects per built-in resource with
//!   `commonEncodingVersion` and the `AllEncodingVersionsEqual` condition [13], several
//!   instances that can disagree, and the
//!   `kube-system/extension-apiserver-authentication` ConfigMap [14].
//! - **Faults** (`faults`): per route (verb + resource [+ namespace, name]): a share of 5xx,
//!   429 with Retry-After, latency, dropped connections, webhook-style 403/422 denials.
//! - **Counters** (`metrics`): requests by verb and resource, bytes in/out, writes performed
//!   and skipped, peak requests per second (1 s window), and a log of every LIST page.
//!
//! Deliberate simplifications are named where they live (e.g. strategic merge is a merge
//! patch, server-side apply does not detect field conflicts, lists are tracked atomically in
//! managedFields, namespace and CRD deletion cascade at once, JSON is written with sorted
//! keys, and protobuf only for the metadata forms, Statuses and ConfigMaps).
// A test double, not a layer: documented where its behaviour is not kube-apiserver's own.
#![allow(missing_docs)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod apiservers;
pub mod auth;
pub mod continue_token;
pub mod control;
pub mod crd;
pub mod discovery;
pub mod engine;
pub mod faults;
pub mod handle;
pub mod http;
pub mod kinds;
pub mod metrics;
pub mod negotiate;
pub mod object;
pub mod objects;
pub mod pki;
pub mod protobuf;
pub mod resources;
pub mod reviews;
pub mod route;
pub mod selector;
pub mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod watch;

pub use auth::{AccessRule, TokenUser};
pub use control::StoredObject;
pub use crd::manifest as crd_manifest;
pub use faults::{Fault, FaultRule};
pub use handle::{Builder, KubeDouble, StartError};
pub use metrics::{CountersSnapshot, ListRecord};
pub use pki::CertPair;
pub use resources::GroupResource;
pub use status::StatusError;

//! `svm-apiserver import-ksvm`: carries kube-storage-version-migrator's (KSVM's)
//! `migration.k8s.io/v1alpha1` StorageStates and StorageVersionMigrations over to this server.
//!
//! - **StorageStates** keep every hash KSVM recorded: a new one is created with KSVM's
//!   persisted and current hashes and heartbeat; an existing one (the trigger got there
//!   first, or an earlier import) gets the union of its persisted hashes and KSVM's (KSVM's
//!   current hash included), never fewer. A resource KSVM thought safe stays safe; one it knew
//!   to be unsafe stays unsafe until a migration here makes it safe.
//! - **Finished migrations** (Succeeded or Failed) become history: created under the same
//!   name with KSVM's conditions, and marked with [`IMPORTED_HISTORY_ANNOTATION`] so the
//!   migrator never runs them. **Unfinished** ones are created without status, so the migrator
//!   here runs them (from the start: KSVM's continue token belongs to its own list).
//! - **Idempotent**: everything imported carries [`IMPORTED_UID_ANNOTATION`] (KSVM's uid); a
//!   second run finds nothing to change. A migration of the same name that was not imported
//!   from that object is left alone and reported.
//!
//! Everything is written through this server's API (create, then `/status`), as any client
//! would: validation, resourceVersions and watch events stay one code path, and the import
//! needs no access to our etcd. The StorageVersionMigration wire shape of KSVM's v1alpha1 is
//! exactly our v1alpha1's, so conditions travel unchanged.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde::{Deserialize, Serialize};

use svm_api::names::{IMPORTED_HISTORY_ANNOTATION, IMPORTED_UID_ANNOTATION};
use svm_api::storagestate::{StorageState as InternalState, UNKNOWN_HASH};

/// KSVM's API group and version.
pub const KSVM_GROUP: &str = "migration.k8s.io";
/// The one version KSVM serves.
pub const KSVM_VERSION: &str = "v1alpha1";

// ---- The v1alpha1 wire shapes: KSVM's published API types, and our v1alpha1. ----

/// A group and a resource, as a StorageState names them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResource {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The plural resource name.
    #[serde(default)]
    pub resource: String,
}

/// A StorageState's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageStateSpec {
    /// The resource the StorageState describes.
    #[serde(default)]
    pub resource: GroupResource,
}

/// A StorageState's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageStateStatus {
    /// The hashes stored objects may be encoded in (`Unknown` when nobody knows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persisted_storage_version_hashes: Vec<String>,
    /// The hash of the resource's current storage version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_storage_version_hash: String,
    /// When the trigger last confirmed the state (RFC 3339, carried over as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<String>,
}

/// A StorageState in `v1alpha1`, KSVM's and ours alike.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageState {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The resource.
    #[serde(default)]
    pub spec: StorageStateSpec,
    /// The hashes.
    #[serde(default)]
    pub status: StorageStateStatus,
}

/// The resource a migration migrates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionResource {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The version to migrate through; empty for the preferred one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The plural resource name.
    #[serde(default)]
    pub resource: String,
}

/// A StorageVersionMigration's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The resource to migrate.
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// KSVM's progress token: its own list's, so never carried over.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
}

/// One condition of a migration, v1alpha1's shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationCondition {
    /// `Running`, `Succeeded` or `Failed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the condition last changed (RFC 3339, carried over as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// The reason for the last change, CamelCase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Details of the last change, for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A StorageVersionMigration's status: its conditions only (the shape KSVM and our v1alpha1
/// share; our `status.progress` is not read).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// The migration's conditions; none until it started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MigrationCondition>,
}

/// A StorageVersionMigration in `v1alpha1`, KSVM's and ours alike.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageVersionMigration {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What to migrate.
    #[serde(default)]
    pub spec: MigrationSpec,
    /// How far it got.
    #[serde(default)]
    pub status: MigrationStatus,
}

impl StorageVersionMigration {
    /// `Succeeded` or `Failed` when that condition is True (KSVM's terminal states).
    fn finished(&self) -> Option<&'static str> {
        ["Succeeded", "Failed"].into_iter().find(|t| {
            self.status
                .conditions
                .iter()
                .any(|c| c.type_ == *t && c.status == "True")
        })
    }

    /// KSVM's uid this migration was imported from; under the annotation's old spelling too,
    /// so that a second import after an upgrade finds what the first one made.
    fn imported_uid(&self) -> Option<&str> {
        svm_api::names::annotation(&self.metadata, IMPORTED_UID_ANNOTATION)
    }
}

// ---- The plan: a pure function of both sides. ----

/// What the import does with one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Not here yet: create it (then write its status, where it has one).
    Create,
    /// Our StorageState gains persisted hashes.
    AddHashes(Vec<String>),
    /// Our imported history migration lacks KSVM's status (an interrupted import).
    WriteStatus,
    /// Here already as the import would make it: nothing to write.
    Unchanged,
    /// Left alone, and why.
    Skip(String),
}

/// What the import does with one KSVM StorageState.
#[derive(Clone, Debug, PartialEq)]
pub struct StatePlan {
    /// Our StorageState's name (`<resource>.<group>`, `<resource>` for the core group).
    pub name: String,
    /// What is done with it.
    pub action: Action,
    /// What ours will hold.
    pub object: StorageState,
}

/// What the import does with one KSVM StorageVersionMigration.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationPlan {
    /// The migration's name, the same here as in KSVM.
    pub name: String,
    /// What is done with it.
    pub action: Action,
    /// `Succeeded` / `Failed` (imported as history) or `Pending` (the migrator runs it).
    pub imported_as: &'static str,
    /// What ours will hold: KSVM's spec (without its continue token) and, for history, its status.
    pub object: StorageVersionMigration,
}

/// The whole import: what is done with each of KSVM's objects, sorted by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// One entry per KSVM StorageState.
    pub states: Vec<StatePlan>,
    /// One entry per KSVM StorageVersionMigration.
    pub migrations: Vec<MigrationPlan>,
}

impl Plan {
    /// Whether applying it would write anything.
    pub fn changes(&self) -> bool {
        self.states
            .iter()
            .map(|s| &s.action)
            .chain(self.migrations.iter().map(|m| &m.action))
            .any(|a| {
                matches!(
                    a,
                    Action::Create | Action::AddHashes(_) | Action::WriteStatus
                )
            })
    }
}

fn annotated(uid: Option<&str>, history: bool) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    if let Some(uid) = uid {
        annotations.insert(IMPORTED_UID_ANNOTATION.to_string(), uid.to_string());
    }
    if history {
        annotations.insert(IMPORTED_HISTORY_ANNOTATION.to_string(), "true".to_string());
    }
    annotations
}

fn plan_state(ksvm: &StorageState, ours: Option<&StorageState>) -> StatePlan {
    let resource = &ksvm.spec.resource;
    if resource.resource.is_empty() {
        return StatePlan {
            name: ksvm.metadata.name.clone().unwrap_or_default(),
            action: Action::Skip("spec.resource.resource is empty".into()),
            object: ksvm.clone(),
        };
    }
    let name = InternalState::name_for(&resource.group, &resource.resource);
    let theirs = ksvm_hashes(ksvm);
    match ours {
        None => StatePlan {
            action: Action::Create,
            object: created_state(ksvm, &name, theirs),
            name,
        },
        Some(ours) => merged_state(
            ours,
            name,
            &theirs,
            &ksvm.status.current_storage_version_hash,
        ),
    }
}

/// What KSVM says objects may be stored in: its persisted hashes and its current one (KSVM
/// appends the current hash to the persisted ones; a hand-edited object may not); `Unknown`
/// when it names none.
fn ksvm_hashes(ksvm: &StorageState) -> Vec<String> {
    let mut theirs: Vec<String> = ksvm.status.persisted_storage_version_hashes.clone();
    if theirs.is_empty() {
        theirs.push(UNKNOWN_HASH.to_string());
    }
    let current = &ksvm.status.current_storage_version_hash;
    if !current.is_empty() && !theirs.contains(current) {
        theirs.push(current.clone());
    }
    theirs
}

/// A StorageState made from KSVM's, with its hashes `theirs`.
fn created_state(ksvm: &StorageState, name: &str, theirs: Vec<String>) -> StorageState {
    StorageState {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(annotated(ksvm.metadata.uid.as_deref(), false)),
            ..Default::default()
        },
        spec: ksvm.spec.clone(),
        status: StorageStateStatus {
            persisted_storage_version_hashes: theirs,
            current_storage_version_hash: ksvm.status.current_storage_version_hash.clone(),
            last_heartbeat_time: ksvm.status.last_heartbeat_time.clone(),
        },
    }
}

/// Ours with KSVM's hashes added (never fewer than either had).
fn merged_state(ours: &StorageState, name: String, theirs: &[String], current: &str) -> StatePlan {
    let mut next = ours.clone();
    let persisted = &mut next.status.persisted_storage_version_hashes;
    let added: Vec<String> = theirs
        .iter()
        .filter(|h| !persisted.contains(h))
        .cloned()
        .collect();
    persisted.extend(added.iter().cloned());
    if next.status.current_storage_version_hash.is_empty() {
        next.status.current_storage_version_hash = current.to_string();
    }
    StatePlan {
        name,
        action: if added.is_empty() {
            Action::Unchanged
        } else {
            Action::AddHashes(added)
        },
        object: next,
    }
}

fn plan_migration(
    ksvm: &StorageVersionMigration,
    ours: Option<&StorageVersionMigration>,
) -> MigrationPlan {
    let name = ksvm.metadata.name.clone().unwrap_or_default();
    let finished = ksvm.finished();
    let uid = ksvm.metadata.uid.as_deref();
    let object = StorageVersionMigration {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: ksvm.metadata.labels.clone(),
            annotations: Some(annotated(uid, finished.is_some())),
            ..Default::default()
        },
        spec: MigrationSpec {
            resource: ksvm.spec.resource.clone(),
            continue_token: String::new(),
        },
        status: if finished.is_some() {
            ksvm.status.clone()
        } else {
            MigrationStatus::default()
        },
    };
    let action = match ours {
        None => Action::Create,
        Some(ours) if ours.imported_uid().is_some() && ours.imported_uid() == uid => {
            if finished.is_some() && ours.status.conditions.is_empty() {
                Action::WriteStatus
            } else {
                Action::Unchanged
            }
        }
        Some(_) => Action::Skip(
            "a migration of this name exists here and was not imported from this one".into(),
        ),
    };
    MigrationPlan {
        name,
        action,
        imported_as: finished.unwrap_or("Pending"),
        object,
    }
}

/// What importing `ksvm_*` into a server holding `ours_*` does.
pub fn plan(
    ksvm_states: &[StorageState],
    ksvm_migrations: &[StorageVersionMigration],
    our_states: &[StorageState],
    our_migrations: &[StorageVersionMigration],
) -> Plan {
    let ours_by_name = |name: &str| {
        our_states
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    };
    let mut states: Vec<StatePlan> = ksvm_states
        .iter()
        .map(|k| {
            let r = &k.spec.resource;
            plan_state(
                k,
                ours_by_name(&InternalState::name_for(&r.group, &r.resource)),
            )
        })
        .collect();
    states.sort_by(|a, b| a.name.cmp(&b.name));
    let mut migrations: Vec<MigrationPlan> = ksvm_migrations
        .iter()
        .map(|k| {
            plan_migration(
                k,
                our_migrations
                    .iter()
                    .find(|m| m.metadata.name == k.metadata.name),
            )
        })
        .collect();
    migrations.sort_by(|a, b| a.name.cmp(&b.name));
    Plan { states, migrations }
}

/// The plan for people: one line per object.
pub fn render(plan: &Plan, dry_run: bool) -> String {
    let mut out = String::new();
    let verb = |a: &Action| match a {
        Action::Create => "create".to_string(),
        Action::AddHashes(h) => format!("add persisted hashes {}", h.join(",")),
        Action::WriteStatus => "write status".to_string(),
        Action::Unchanged => "unchanged".to_string(),
        Action::Skip(why) => format!("skip: {why}"),
    };
    let _ = writeln!(
        out,
        "{} StorageStates, {} StorageVersionMigrations from {KSVM_GROUP}/{KSVM_VERSION}{}",
        plan.states.len(),
        plan.migrations.len(),
        if dry_run {
            " (dry run: nothing is written)"
        } else {
            ""
        }
    );
    for s in &plan.states {
        let _ = writeln!(
            out,
            "storagestate/{}: {} (persisted {}, current {})",
            s.name,
            verb(&s.action),
            s.object.status.persisted_storage_version_hashes.join(","),
            if s.object.status.current_storage_version_hash.is_empty() {
                "-"
            } else {
                &s.object.status.current_storage_version_hash
            },
        );
    }
    for m in &plan.migrations {
        let r = &m.object.spec.resource;
        let resource = if r.group.is_empty() {
            r.resource.clone()
        } else {
            format!("{}.{}", r.resource, r.group)
        };
        let as_what = if m.imported_as == "Pending" {
            "to run here".to_string()
        } else {
            format!("history, {}", m.imported_as)
        };
        let _ = writeln!(
            out,
            "storageversionmigration/{}: {} ({resource}, {as_what})",
            m.name,
            verb(&m.action)
        );
    }
    out
}

// ---- Reading and writing. ----

/// Errors of the import, each naming what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A kubeconfig that does not read or load.
    #[error("{doing} {}", path.display())]
    Kubeconfig {
        /// Reading or loading.
        doing: &'static str,
        /// The kubeconfig file.
        path: std::path::PathBuf,
        /// kube's reason.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig given and none found (`KUBECONFIG`, `~/.kube/config`, in-cluster).
    #[error("finding a kubeconfig")]
    NoKubeconfig(#[source] kube::config::InferConfigError),
    /// A request to either API failed.
    #[error("{doing}: {source}")]
    Kube {
        /// What the import was doing.
        doing: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An object did not have the shape expected of it.
    #[error("{doing}: {source}")]
    Decode {
        /// What the import was doing.
        doing: String,
        /// Where the shape was wrong.
        #[source]
        source: serde_json::Error,
    },
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// The four APIs: KSVM's (read) and ours (v1alpha1, the shape KSVM's objects have).
pub struct Apis {
    ksvm_states: Api<DynamicObject>,
    ksvm_migrations: Api<DynamicObject>,
    our_states: Api<DynamicObject>,
    our_migrations: Api<DynamicObject>,
}

impl Apis {
    /// `source` is the cluster KSVM runs in; `target` reaches this server (the same cluster
    /// through the aggregator, or the server itself).
    pub fn new(source: &kube::Client, target: &kube::Client) -> Self {
        Self {
            ksvm_states: api(
                source,
                KSVM_GROUP,
                KSVM_VERSION,
                "StorageState",
                "storagestates",
            ),
            ksvm_migrations: api(
                source,
                KSVM_GROUP,
                KSVM_VERSION,
                "StorageVersionMigration",
                "storageversionmigrations",
            ),
            our_states: api(
                target,
                svm_api::GROUP,
                "v1alpha1",
                "StorageState",
                "storagestates",
            ),
            our_migrations: api(
                target,
                svm_api::GROUP,
                "v1alpha1",
                "StorageVersionMigration",
                "storageversionmigrations",
            ),
        }
    }
}

async fn list<T: serde::de::DeserializeOwned>(
    api: &Api<DynamicObject>,
    what: &str,
) -> Result<Vec<T>, ImportError> {
    let doing = format!("listing {what}");
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(|source| ImportError::Kube {
            doing: doing.clone(),
            source,
        })?;
    listed
        .items
        .into_iter()
        .map(|o| {
            serde_json::to_value(o)
                .and_then(serde_json::from_value)
                .map_err(|source| ImportError::Decode {
                    doing: doing.clone(),
                    source,
                })
        })
        .collect()
}

/// Reads both sides and plans.
pub async fn read_plan(apis: &Apis) -> Result<Plan, ImportError> {
    let ksvm_states: Vec<StorageState> =
        list(&apis.ksvm_states, "KSVM StorageStates (migration.k8s.io)").await?;
    let ksvm_migrations: Vec<StorageVersionMigration> = list(
        &apis.ksvm_migrations,
        "KSVM StorageVersionMigrations (migration.k8s.io)",
    )
    .await?;
    let our_states: Vec<StorageState> =
        list(&apis.our_states, "StorageStates (storagemigration.k8s.io)").await?;
    let our_migrations: Vec<StorageVersionMigration> = list(
        &apis.our_migrations,
        "StorageVersionMigrations (storagemigration.k8s.io)",
    )
    .await?;
    Ok(plan(
        &ksvm_states,
        &ksvm_migrations,
        &our_states,
        &our_migrations,
    ))
}

fn to_dynamic<T: Serialize>(
    object: &T,
    kind: &str,
    doing: &str,
) -> Result<DynamicObject, ImportError> {
    let mut value = serde_json::to_value(object).map_err(|source| ImportError::Decode {
        doing: doing.to_string(),
        source,
    })?;
    value["apiVersion"] = format!("{}/v1alpha1", svm_api::GROUP).into();
    value["kind"] = kind.into();
    serde_json::from_value(value).map_err(|source| ImportError::Decode {
        doing: doing.to_string(),
        source,
    })
}

/// Creates `object`, then writes its status through `/status` (create drops status, as
/// kube-apiserver does for every kind with a status subresource).
async fn create_with_status<T: Serialize>(
    api: &Api<DynamicObject>,
    object: &T,
    kind: &str,
    name: &str,
    with_status: bool,
) -> Result<(), ImportError> {
    let doing = format!("creating {kind} {name}");
    let body = to_dynamic(object, kind, &doing)?;
    let created = api
        .create(&PostParams::default(), &body)
        .await
        .map_err(|source| ImportError::Kube {
            doing: doing.clone(),
            source,
        })?;
    if with_status {
        write_status(api, object, kind, name, created.metadata.resource_version).await?;
    }
    Ok(())
}

async fn write_status<T: Serialize>(
    api: &Api<DynamicObject>,
    object: &T,
    kind: &str,
    name: &str,
    resource_version: Option<String>,
) -> Result<(), ImportError> {
    let doing = format!("writing the status of {kind} {name}");
    let mut body = to_dynamic(object, kind, &doing)?;
    body.metadata.resource_version = resource_version;
    api.replace_status(name, &PostParams::default(), &body)
        .await
        .map_err(|source| ImportError::Kube { doing, source })?;
    Ok(())
}

/// Applies the plan. Returns how many objects were written.
pub async fn apply(apis: &Apis, plan: &Plan) -> Result<usize, ImportError> {
    let mut written = 0;
    for s in &plan.states {
        match &s.action {
            Action::Create => {
                create_with_status(&apis.our_states, &s.object, "StorageState", &s.name, true)
                    .await?;
            }
            Action::AddHashes(_) => {
                // With the resourceVersion we read: a concurrent change (the trigger) makes
                // this a conflict, and a re-run plans again from what is there then.
                let rv = s.object.metadata.resource_version.clone();
                write_status(&apis.our_states, &s.object, "StorageState", &s.name, rv).await?;
            }
            Action::WriteStatus | Action::Unchanged | Action::Skip(_) => continue,
        }
        written += 1;
    }
    for m in &plan.migrations {
        let history = m.imported_as != "Pending";
        match &m.action {
            Action::Create => {
                create_with_status(
                    &apis.our_migrations,
                    &m.object,
                    "StorageVersionMigration",
                    &m.name,
                    history,
                )
                .await?;
            }
            Action::WriteStatus => {
                let current =
                    apis.our_migrations
                        .get(&m.name)
                        .await
                        .map_err(|source| ImportError::Kube {
                            doing: format!("reading StorageVersionMigration {}", m.name),
                            source,
                        })?;
                write_status(
                    &apis.our_migrations,
                    &m.object,
                    "StorageVersionMigration",
                    &m.name,
                    current.metadata.resource_version,
                )
                .await?;
            }
            Action::AddHashes(_) | Action::Unchanged | Action::Skip(_) => continue,
        }
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests;

// ---- The subcommand. ----

/// Flags of `svm-apiserver import-ksvm`.
#[derive(clap::Args, Clone, Debug)]
pub struct ImportOptions {
    /// kubeconfig of the cluster KSVM runs in (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster configuration).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// kubeconfig that reaches this server's API (default: the same cluster, through the
    /// aggregator's APIService for storagemigration.k8s.io).
    #[arg(long)]
    pub target_kubeconfig: Option<std::path::PathBuf>,
    /// Print the plan and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

async fn client(path: Option<&std::path::Path>) -> Result<kube::Client, ImportError> {
    let kubeconfig = |doing, path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Kubeconfig {
            doing,
            path,
            source,
        }
    };
    let config = match path {
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(kubeconfig("reading", path))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(kubeconfig("loading", path))?
        }
        None => kube::Config::infer()
            .await
            .map_err(ImportError::NoKubeconfig)?,
    };
    kube::Client::try_from(config).map_err(|source| ImportError::Kube {
        doing: "building the client".into(),
        source,
    })
}

/// Runs the import: prints the plan, and applies it unless `--dry-run`.
pub async fn run(options: &ImportOptions) -> Result<(), ImportError> {
    let source = client(options.kubeconfig.as_deref()).await?;
    let target = match &options.target_kubeconfig {
        Some(path) => client(Some(path)).await?,
        None => source.clone(),
    };
    let apis = Apis::new(&source, &target);
    let plan = read_plan(&apis).await?;
    print!("{}", render(&plan, options.dry_run));
    if options.dry_run {
        return Ok(());
    }
    if !plan.changes() {
        println!("nothing to import: everything is here already");
        return Ok(());
    }
    let written = apply(&apis, &plan).await?;
    println!("imported: {written} objects written");
    Ok(())
}

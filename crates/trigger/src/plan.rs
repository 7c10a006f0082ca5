//! The trigger's decisions, as pure functions of what is recorded and what is observed
//! (docs/design.md, "The trigger and StorageStates"), so every rule is tested without a cluster:
//!
//! - [`plan_state`]: which hashes to append to the history and what the StorageState's status
//!   becomes. Every change of the observed hash is appended; apiservers that disagree record
//!   every hash they use and make the current hash `Unknown`; what the trigger cannot vouch
//!   for appends `Unknown`. Persisted hashes only grow here.
//! - [`plan_migrations`]: which of the trigger's migrations of the resource to delete, whether
//!   to create one, and whether a finished one lets the persisted hashes narrow. A migration
//!   belongs to one history entry (its sequence number is in its name); any later entry makes
//!   it stale, because it may have passed objects that were written afterwards in another
//!   encoding. So a success narrows the persisted hashes only if nothing was recorded since
//!   the migration was created.

use svm_api::migration::{FAILED, StorageVersionMigration};
use svm_api::names::annotation;
use svm_api::storagestate::{StorageState, UNKNOWN_HASH};

use super::encryption::Generation;
use super::history::{EncryptionKind, EncryptionRecord, NewEntry, Source};

/// One apiserver's encoding of a resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Encoding {
    pub hash: String,
    /// `apps/v1`, `v1`.
    pub encoding_version: String,
    /// The apiserver identity, when the source says which apiserver this is.
    pub apiserver: Option<String>,
}

/// What the cluster shows for a resource now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum View {
    /// Every apiserver (that the source can see) encodes in this one.
    Agreed(Encoding),
    /// Apiservers use different encodings (an HA rolling upgrade): one entry per apiserver.
    Disagreed(Vec<Encoding>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    pub group: String,
    pub resource: String,
    pub view: View,
    pub source: Source,
    /// Encodings the cluster itself says objects may still be stored in (a CRD's
    /// `status.storedVersions`).
    pub stored: Vec<Encoding>,
}

/// What [`plan_state`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StatePlan {
    pub entries: Vec<NewEntry>,
    pub current: String,
    pub persisted: Vec<String>,
}

impl StatePlan {
    pub(crate) fn changes(&self, state: Option<&StorageState>) -> bool {
        match state {
            None => true,
            Some(state) => {
                !self.entries.is_empty()
                    || state.status.current_storage_version_hash != self.current
                    || state.status.persisted_storage_version_hashes != self.persisted
            }
        }
    }
}

/// `apps/v1`, or the hash when the source does not say (discovery publishes only the hash).
fn describe(encoding: &Encoding) -> String {
    if encoding.encoding_version.is_empty() {
        format!("hash {}", encoding.hash)
    } else {
        encoding.encoding_version.clone()
    }
}

fn version_field(encoding: &Encoding) -> Option<String> {
    Some(encoding.encoding_version.clone()).filter(|v| !v.is_empty())
}

fn push_unique(list: &mut Vec<String>, hash: &str) {
    if !list.iter().any(|h| h == hash) {
        list.push(hash.to_string());
    }
}

/// Decides the history entries and the new status of a resource's StorageState.
///
/// - `unvouched`: why the trigger cannot vouch for what the resource's objects were written
///   in since it last looked (appends `Unknown`).
/// - `include_stored`: take `observed.stored` into account (on start and after a watch had
///   a gap; in between, the watch saw every change itself).
pub(crate) fn plan_state(
    state: Option<&StorageState>,
    observed: &Observed,
    unvouched: Option<&str>,
    include_stored: bool,
) -> StatePlan {
    let mut plan = StatePlan::starting_from(state);
    let recorded_current = state.map_or("", |s| s.status.current_storage_version_hash.as_str());
    if let Some(reason) = unvouched {
        plan.unvouched(reason);
    }
    if include_stored {
        plan.still_stored(observed);
    }
    plan.current = match &observed.view {
        View::Agreed(encoding) => {
            let reason = agreed_reason(state.is_some(), recorded_current, encoding);
            plan.agreed(observed.source, encoding, reason)
        }
        View::Disagreed(encodings) => {
            // Entering disagreement records every encoding; staying in it, only new ones.
            let entering = recorded_current != UNKNOWN_HASH;
            plan.disagreed(observed.source, encodings, entering)
        }
    };
    plan
}

/// Why the agreed encoding is recorded, or `None` when it is the one already current.
fn agreed_reason(known: bool, recorded_current: &str, encoding: &Encoding) -> Option<String> {
    if recorded_current == encoding.hash {
        None
    } else if !known {
        Some(format!("first seen, encoded as {}", describe(encoding)))
    } else if recorded_current == UNKNOWN_HASH {
        Some(format!("apiservers agree on {}", describe(encoding)))
    } else {
        Some(format!(
            "storage version hash changed from {recorded_current} to {} ({})",
            encoding.hash,
            describe(encoding)
        ))
    }
}

impl StatePlan {
    /// The state's persisted hashes, or `Unknown` alone for a new StorageState: nothing is
    /// known about objects written before now.
    fn starting_from(state: Option<&StorageState>) -> Self {
        let mut persisted = state
            .map(|s| s.status.persisted_storage_version_hashes.clone())
            .unwrap_or_default();
        if persisted.is_empty() {
            persisted.push(UNKNOWN_HASH.to_string());
        }
        StatePlan {
            entries: Vec::new(),
            current: String::new(),
            persisted,
        }
    }

    fn record(&mut self, source: Source, encoding: &Encoding, reason: String) {
        self.entries.push(NewEntry {
            hash: encoding.hash.clone(),
            source,
            apiserver: encoding.apiserver.clone(),
            encoding_version: version_field(encoding),
            reason,
            encryption: None,
        });
    }

    fn unvouched(&mut self, reason: &str) {
        self.entries.push(NewEntry {
            hash: UNKNOWN_HASH.into(),
            source: Source::Unvouched,
            apiserver: None,
            encoding_version: None,
            reason: reason.to_string(),
            encryption: None,
        });
        push_unique(&mut self.persisted, UNKNOWN_HASH);
    }

    /// Encodings objects may still be stored in (`status.storedVersions`) that are neither
    /// persisted already nor current.
    fn still_stored(&mut self, observed: &Observed) {
        let current: Vec<&str> = match &observed.view {
            View::Agreed(e) => vec![e.hash.as_str()],
            View::Disagreed(all) => all.iter().map(|e| e.hash.as_str()).collect(),
        };
        for stored in &observed.stored {
            if self.persisted.contains(&stored.hash) || current.contains(&stored.hash.as_str()) {
                continue;
            }
            let reason = format!(
                "objects may still be stored as {} (status.storedVersions)",
                stored.encoding_version
            );
            self.record(observed.source, stored, reason);
            push_unique(&mut self.persisted, &stored.hash);
        }
    }

    /// Every apiserver encodes the same way: that is the current hash.
    fn agreed(&mut self, source: Source, encoding: &Encoding, reason: Option<String>) -> String {
        if let Some(reason) = reason {
            self.record(source, encoding, reason);
        }
        push_unique(&mut self.persisted, &encoding.hash);
        encoding.hash.clone()
    }

    /// Apiservers encode differently: every encoding may be persisted, and the current hash
    /// is `Unknown` until they agree.
    fn disagreed(&mut self, source: Source, encodings: &[Encoding], entering: bool) -> String {
        let summary = encodings
            .iter()
            .map(|e| {
                let who = e.apiserver.as_deref().unwrap_or("an apiserver");
                format!("{who} encodes {}", describe(e))
            })
            .collect::<Vec<_>>()
            .join(", ");
        for encoding in encodings {
            if entering || !self.persisted.contains(&encoding.hash) {
                self.record(source, encoding, format!("apiservers disagree: {summary}"));
            }
            push_unique(&mut self.persisted, &encoding.hash);
        }
        UNKNOWN_HASH.to_string()
    }
}

/// The encryption entry a resource is owed now that every apiserver applies `now`: a
/// baseline when the history has none (the first generation seen is where the trigger
/// starts, not a change), a rotation when it differs from the last recorded (also one that
/// happened while the trigger was away: the history is what it compares with), else nothing.
/// `storage_hash` is the resource's current storage-version hash, unchanged by a rotation.
pub(crate) fn plan_encryption(
    last: Option<&Generation>,
    now: &Generation,
    storage_hash: &str,
) -> Option<NewEntry> {
    let (kind, reason) = match last {
        Some(last) if last == now => return None,
        Some(last) => (
            EncryptionKind::Rotation,
            format!(
                "encryption key rotation: every kube-apiserver applies {} (was {})",
                now.describe(),
                last.describe()
            ),
        ),
        None => (
            EncryptionKind::Baseline,
            format!(
                "encryption generation first recorded: {} (a baseline, not a rotation)",
                now.describe()
            ),
        ),
    };
    Some(NewEntry {
        hash: storage_hash.to_string(),
        source: Source::ApiserverMetrics,
        apiserver: None,
        encoding_version: None,
        reason,
        encryption: Some(EncryptionRecord {
            kind,
            generation: now.clone(),
            previous: last.cloned(),
        }),
    })
}

/// The entry saying a rotation's migration re-encrypted every object.
pub(crate) fn applied_entry(rotation: &EncryptionRecord, migration: &str, hash: &str) -> NewEntry {
    NewEntry {
        hash: hash.to_string(),
        source: Source::ApiserverMetrics,
        apiserver: None,
        encoding_version: None,
        reason: format!(
            "every object re-encrypted under {} (migration {migration} succeeded)",
            rotation.generation.describe()
        ),
        encryption: Some(EncryptionRecord {
            kind: EncryptionKind::Applied,
            generation: rotation.generation.clone(),
            previous: rotation.previous.clone(),
        }),
    }
}

// The trigger's labels and annotations are owned by `svm_api::names` with our other names.
pub(crate) use svm_api::names::{
    ENCRYPTION_GENERATION_ANNOTATION as GENERATION_ANNOTATION,
    ENCRYPTION_ROTATION_LABEL as ROTATION_LABEL, HISTORY_SEQ_ANNOTATION,
    LEGACY_ENCRYPTION_ROTATION_LABEL as LEGACY_ROTATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL,
    STORAGE_VERSION_HASH_ANNOTATION as HASH_ANNOTATION,
    TRIGGER_REASON_ANNOTATION as REASON_ANNOTATION,
};

/// The name of the migration for history entry `seq` of a StorageState: deterministic, so two
/// replicas (or a retried create) can never start two migrations for one change.
pub(crate) fn migration_name(state_name: &str, seq: u64) -> String {
    let suffix = format!("-{seq}");
    let room = 253 - suffix.len();
    let mut base: &str = state_name;
    if base.len() > room {
        base = &base[..room];
        base = base.trim_end_matches(['.', '-']);
    }
    format!("{base}{suffix}")
}

/// A trigger migration as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnedMigration {
    pub name: String,
    /// The uid listed: a deletion's precondition (a migration of that name made again since
    /// is not the stale one).
    pub uid: String,
    pub seq: Option<u64>,
    pub hash: String,
    pub succeeded: bool,
    pub failed: bool,
}

impl OwnedMigration {
    /// A migration of `group/resource` the trigger created, or `None`.
    pub(crate) fn of(m: &StorageVersionMigration, group: &str, resource: &str) -> Option<Self> {
        let labels = m.metadata.labels.as_ref()?;
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY)
            || m.spec.resource.group != group
            || m.spec.resource.resource != resource
        {
            return None;
        }
        // Under the old spellings too: a migration an older trigger made, still running or
        // the record of the last entry, is this trigger's — read without them it would have
        // no entry, be deleted as stale and made again from the start.
        let annotation = |name| annotation(&m.metadata, name);
        Some(Self {
            name: m.metadata.name.clone().unwrap_or_default(),
            uid: m.metadata.uid.clone().unwrap_or_default(),
            seq: annotation(HISTORY_SEQ_ANNOTATION).and_then(|s| s.parse().ok()),
            hash: annotation(HASH_ANNOTATION).unwrap_or_default().to_string(),
            // Succeeded with objects skipped (the policy Skip) did not migrate every object:
            // the resource stays unsafe, its hashes are not narrowed.
            succeeded: m.migrated_every_object(),
            failed: m.condition_true(FAILED).is_some(),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MigrationPlan {
    /// Stale migrations (of an earlier history entry).
    pub delete: Vec<String>,
    /// A migration to create: its name.
    pub create: Option<String>,
    /// The migration of the last entry succeeded: persisted hashes narrow to the current one
    /// (and an owed rotation is applied).
    pub narrow: bool,
}

/// Decides the trigger's migrations of one resource, after its status was planned.
/// `last_seq` is the newest entry that calls for a migration; `rotation_owed`: a key rotation
/// recorded and not yet applied (the storage versions may be safe, the keys are not).
pub(crate) fn plan_migrations(
    state_name: &str,
    current: &str,
    persisted: &[String],
    last_seq: u64,
    migrations: &[OwnedMigration],
    rotation_owed: bool,
) -> MigrationPlan {
    let mut plan = MigrationPlan::default();
    for m in migrations {
        if m.seq != Some(last_seq) {
            plan.delete.push(m.name.clone());
        }
    }
    let safe = persisted.len() == 1 && persisted[0] == current;
    if current == UNKNOWN_HASH || current.is_empty() || (safe && !rotation_owed) {
        return plan;
    }
    match migrations.iter().find(|m| m.seq == Some(last_seq)) {
        Some(m) if m.succeeded && m.hash == current => plan.narrow = true,
        // Running, pending or failed: the user sees it; deleting a failed one starts anew.
        Some(_) => {}
        None => plan.create = Some(migration_name(state_name, last_seq)),
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use svm_api::storagestate::{GroupResource, StorageStateSpec, StorageStateStatus};

    fn enc(hash: &str, version: &str, apiserver: Option<&str>) -> Encoding {
        Encoding {
            hash: hash.into(),
            encoding_version: version.into(),
            apiserver: apiserver.map(str::to_string),
        }
    }

    fn agreed(hash: &str) -> Observed {
        Observed {
            group: "apps".into(),
            resource: "deployments".into(),
            view: View::Agreed(enc(hash, "apps/v1", Some("apiserver-a"))),
            source: Source::Discovery,
            stored: vec![],
        }
    }

    fn state(current: &str, persisted: &[&str]) -> StorageState {
        StorageState {
            metadata: Default::default(),
            spec: StorageStateSpec {
                resource: GroupResource {
                    group: "apps".into(),
                    resource: "deployments".into(),
                },
            },
            status: StorageStateStatus {
                persisted_storage_version_hashes: persisted.iter().map(|s| s.to_string()).collect(),
                current_storage_version_hash: current.into(),
                last_heartbeat_time: None,
            },
        }
    }

    fn hashes(plan: &StatePlan) -> Vec<&str> {
        plan.entries.iter().map(|e| e.hash.as_str()).collect()
    }

    #[test]
    fn a_new_state_is_unknown_plus_the_current_hash() {
        let plan = plan_state(None, &agreed("A"), None, true);
        assert_eq!(plan.current, "A");
        assert_eq!(plan.persisted, ["Unknown", "A"]);
        assert_eq!(hashes(&plan), ["A"]);
        assert_eq!(plan.entries[0].apiserver.as_deref(), Some("apiserver-a"));
        assert!(plan.changes(None));
    }

    #[test]
    fn nothing_new_plans_nothing() {
        let s = state("A", &["A"]);
        let plan = plan_state(Some(&s), &agreed("A"), None, true);
        assert!(plan.entries.is_empty());
        assert!(!plan.changes(Some(&s)));
    }

    #[test]
    fn a_change_appends_the_new_hash_and_keeps_the_old() {
        let s = state("A", &["A"]);
        let plan = plan_state(Some(&s), &agreed("B"), None, false);
        assert_eq!(hashes(&plan), ["B"]);
        assert_eq!(plan.current, "B");
        assert_eq!(plan.persisted, ["A", "B"]);
        assert!(plan.entries[0].reason.contains("changed from A to B"));
        // And back (a downgrade, or A→B→A seen as two changes): both stay persisted.
        let s = state("B", &["A", "B"]);
        let plan = plan_state(Some(&s), &agreed("A"), None, false);
        assert_eq!(hashes(&plan), ["A"]);
        assert_eq!(plan.persisted, ["A", "B"]);
    }

    #[test]
    fn unvouched_time_appends_unknown() {
        let s = state("A", &["A"]);
        let plan = plan_state(
            Some(&s),
            &agreed("A"),
            Some("apiserver-a restarted unseen"),
            false,
        );
        assert_eq!(hashes(&plan), ["Unknown"]);
        assert_eq!(plan.entries[0].source, Source::Unvouched);
        assert_eq!(plan.persisted, ["A", "Unknown"]);
        assert_eq!(plan.current, "A");
    }

    #[test]
    fn disagreement_records_every_hash_and_current_becomes_unknown() {
        let s = state("A", &["A"]);
        let observed = Observed {
            view: View::Disagreed(vec![
                enc("A", "apps/v1", Some("apiserver-1")),
                enc("B", "apps/v2", Some("apiserver-2")),
            ]),
            source: Source::StorageVersionApi,
            ..agreed("A")
        };
        let plan = plan_state(Some(&s), &observed, None, false);
        assert_eq!(hashes(&plan), ["A", "B"]);
        assert_eq!(plan.entries[1].apiserver.as_deref(), Some("apiserver-2"));
        assert_eq!(plan.current, "Unknown");
        assert_eq!(plan.persisted, ["A", "B"]);
        // Still disagreeing: nothing more to record.
        let s = state("Unknown", &["A", "B"]);
        let plan = plan_state(Some(&s), &observed, None, false);
        assert!(plan.entries.is_empty());
        // They agree: recorded, and current again.
        let plan = plan_state(
            Some(&s),
            &Observed {
                source: Source::StorageVersionApi,
                ..agreed("B")
            },
            None,
            false,
        );
        assert_eq!(hashes(&plan), ["B"]);
        assert!(plan.entries[0].reason.contains("agree"));
        assert_eq!(plan.current, "B");
    }

    #[test]
    fn stored_versions_count_on_resync_only() {
        let s = state("B", &["B"]);
        let observed = Observed {
            stored: vec![
                enc("A", "example.test/v1", None),
                enc("B", "example.test/v2", None),
            ],
            source: Source::CustomResourceDefinition,
            ..agreed("B")
        };
        assert!(
            plan_state(Some(&s), &observed, None, false)
                .entries
                .is_empty()
        );
        let plan = plan_state(Some(&s), &observed, None, true);
        assert_eq!(hashes(&plan), ["A"]);
        assert_eq!(plan.persisted, ["B", "A"]);
        assert!(plan.entries[0].reason.contains("storedVersions"));
    }

    fn owned(name: &str, seq: u64, hash: &str, succeeded: bool, failed: bool) -> OwnedMigration {
        OwnedMigration {
            name: name.into(),
            uid: String::new(),
            seq: Some(seq),
            hash: hash.into(),
            succeeded,
            failed,
        }
    }

    #[test]
    fn a_migration_is_created_for_the_last_entry_and_stale_ones_deleted() {
        let plan = plan_migrations(
            "deployments.apps",
            "B",
            &["A".into(), "B".into()],
            3,
            &[owned("deployments.apps-2", 2, "A", false, false)],
            false,
        );
        assert_eq!(plan.delete, ["deployments.apps-2"]);
        assert_eq!(plan.create.as_deref(), Some("deployments.apps-3"));
        assert!(!plan.narrow);
    }

    #[test]
    fn success_of_the_last_entry_narrows_and_nothing_runs_while_unknown_or_safe() {
        let persisted = ["A".to_string(), "B".to_string()];
        let done = owned("x-3", 3, "B", true, false);
        let plan = plan_migrations("x", "B", &persisted, 3, std::slice::from_ref(&done), false);
        assert!(plan.narrow);
        assert!(plan.create.is_none() && plan.delete.is_empty());
        // Recorded since: the success is stale.
        let plan = plan_migrations("x", "B", &persisted, 4, std::slice::from_ref(&done), false);
        assert!(!plan.narrow);
        assert_eq!(plan.delete, ["x-3"]);
        assert_eq!(plan.create.as_deref(), Some("x-4"));
        // Disagreement: stop and start nothing.
        let plan = plan_migrations(
            "x",
            "Unknown",
            &persisted,
            5,
            &[owned("x-4", 4, "B", false, false)],
            false,
        );
        assert_eq!(plan.delete, ["x-4"]);
        assert!(plan.create.is_none());
        // Safe: nothing to do.
        assert_eq!(
            plan_migrations("x", "B", &["B".into()], 3, &[done], false),
            MigrationPlan::default()
        );
        // Failed: left for the user to see.
        let plan = plan_migrations(
            "x",
            "B",
            &persisted,
            3,
            &[owned("x-3", 3, "B", false, true)],
            false,
        );
        assert_eq!(plan, MigrationPlan::default());
    }

    #[test]
    fn a_success_with_skipped_objects_neither_narrows_nor_starts_again() {
        use svm_api::migration::{MigrationCondition, OBJECTS_SKIPPED, SUCCEEDED};
        let mut m = StorageVersionMigration::default();
        m.metadata.name = Some("x-3".into());
        m.metadata.labels = Some([(MANAGED_BY_LABEL.into(), MANAGED_BY.into())].into());
        m.metadata.annotations = Some(
            [
                (HISTORY_SEQ_ANNOTATION.into(), "3".into()),
                (HASH_ANNOTATION.into(), "B".into()),
            ]
            .into(),
        );
        m.spec.resource.group = "apps".into();
        m.spec.resource.resource = "deployments".into();
        let condition = |type_: &str| MigrationCondition {
            type_: type_.into(),
            status: "True".into(),
            ..Default::default()
        };
        m.status.conditions = vec![condition(SUCCEEDED), condition(OBJECTS_SKIPPED)];
        let seen = OwnedMigration::of(&m, "apps", "deployments").expect("the trigger's");
        assert!(!seen.succeeded && !seen.failed);
        let persisted = ["A".to_string(), "B".to_string()];
        let plan = plan_migrations("x", "B", &persisted, 3, &[seen], false);
        assert_eq!(
            plan,
            MigrationPlan::default(),
            "unsafe, and left for the user to see"
        );
        m.status.conditions.pop();
        let done = OwnedMigration::of(&m, "apps", "deployments").expect("the trigger's");
        assert!(plan_migrations("x", "B", &persisted, 3, &[done], false).narrow);
    }

    /// A migration an older trigger made carries the old spellings of its entry and hash: it
    /// is still this trigger's migration of that entry — kept and, once succeeded, narrowing —
    /// not a stale one to delete and make again.
    #[test]
    fn a_migration_an_older_trigger_made_is_still_recognised() {
        use svm_api::migration::{MigrationCondition, SUCCEEDED};
        let mut m = StorageVersionMigration::default();
        m.metadata.name = Some("x-3".into());
        m.metadata.uid = Some("u".into());
        m.metadata.labels = Some([(MANAGED_BY_LABEL.into(), MANAGED_BY.into())].into());
        m.metadata.annotations = Some(
            [
                ("storagemigration.k8s.io/history-seq".into(), "3".into()),
                (
                    "storagemigration.k8s.io/storage-version-hash".into(),
                    "B".into(),
                ),
            ]
            .into(),
        );
        m.spec.resource.group = "apps".into();
        m.spec.resource.resource = "deployments".into();
        let running = OwnedMigration::of(&m, "apps", "deployments").expect("the trigger's");
        assert_eq!((running.seq, running.hash.as_str()), (Some(3), "B"));
        let persisted = ["A".to_string(), "B".to_string()];
        let plan = plan_migrations("x", "B", &persisted, 3, &[running], false);
        assert_eq!(plan, MigrationPlan::default(), "kept, not made again");
        m.status.conditions = vec![MigrationCondition {
            type_: SUCCEEDED.into(),
            status: "True".into(),
            ..Default::default()
        }];
        let done = OwnedMigration::of(&m, "apps", "deployments").expect("the trigger's");
        assert!(plan_migrations("x", "B", &persisted, 3, &[done], false).narrow);
        // The new names win over the old ones on a migration carrying both.
        m.metadata
            .annotations
            .get_or_insert_default()
            .insert(HISTORY_SEQ_ANNOTATION.into(), "4".into());
        let both = OwnedMigration::of(&m, "apps", "deployments").expect("the trigger's");
        assert_eq!(both.seq, Some(4));
    }

    fn generation(config: &str) -> Generation {
        Generation {
            config_hash: Some(config.into()),
            write_key_id_hash: None,
        }
    }

    #[test]
    fn the_first_generation_is_a_baseline_and_a_change_a_rotation() {
        let k1 = generation("sha256:k1");
        let baseline = plan_encryption(None, &k1, "A").expect("a baseline");
        let record = baseline.encryption.as_ref().expect("encryption");
        assert_eq!(record.kind, EncryptionKind::Baseline);
        assert_eq!(baseline.hash, "A", "the storage version is unchanged");
        assert!(baseline.reason.contains("baseline"), "{}", baseline.reason);
        assert_eq!(plan_encryption(Some(&k1), &k1, "A"), None);
        let k2 = generation("sha256:k2");
        let rotation = plan_encryption(Some(&k1), &k2, "A").expect("a rotation");
        let record = rotation.encryption.as_ref().expect("encryption");
        assert_eq!(record.kind, EncryptionKind::Rotation);
        assert_eq!(record.previous.as_ref(), Some(&k1));
        assert!(rotation.reason.contains("rotation"), "{}", rotation.reason);
        let applied = applied_entry(record, "secrets-3", "A");
        assert_eq!(
            applied.encryption.map(|e| e.kind),
            Some(EncryptionKind::Applied)
        );
    }

    #[test]
    fn a_rotation_migrates_a_safe_resource_once() {
        let safe = ["B".to_string()];
        // Owed: created although every object is in the current storage version.
        let plan = plan_migrations("secrets", "B", &safe, 4, &[], true);
        assert_eq!(plan.create.as_deref(), Some("secrets-4"));
        // Running: nothing more; succeeded: applied (narrow), and then no longer owed.
        let running = owned("secrets-4", 4, "B", false, false);
        assert_eq!(
            plan_migrations("secrets", "B", &safe, 4, &[running], true),
            MigrationPlan::default()
        );
        let done = owned("secrets-4", 4, "B", true, false);
        let plan = plan_migrations("secrets", "B", &safe, 4, std::slice::from_ref(&done), true);
        assert!(plan.narrow);
        // Applied, then the succeeded migration deleted by someone: not run again.
        assert_eq!(
            plan_migrations("secrets", "B", &safe, 4, &[], false),
            MigrationPlan::default()
        );
    }

    #[test]
    fn names_are_valid_and_bounded() {
        assert_eq!(migration_name("configmaps", 7), "configmaps-7");
        let long = format!("{}.example.test", "a".repeat(260));
        let name = migration_name(&long, 12);
        assert!(name.len() <= 253);
        assert!(name.ends_with("-12"));
        let dotted = format!("{}.b", "a".repeat(250));
        let name = migration_name(&dotted, 1);
        assert!(!name.contains(".-"), "{name}");
    }
}

//! Which kube-apiserver instances the trigger has accounted for (docs/design.md, "The trigger and
//! StorageStates").
//!
//! Each kube-apiserver process holds an identity lease in `kube-system` (recording 12): the
//! name comes from its hostname, `spec.holderIdentity` is new for every process, and a
//! restart replaces it. Built-in storage versions are fixed for a process's life, so a
//! resource's encoding can only change when an instance is replaced. An instance is
//! *accounted for* when the trigger has seen what it encodes:
//!
//! - the StorageVersion API is watched: every instance publishes its encodings there before
//!   it may write (KEP-2339), so all are accounted for;
//! - otherwise, a discovery look that started after the instance appeared, while it was the
//!   only live instance — *and* two renewals of its lease received after that look ended.
//!   A look's answer may come from a successor that already serves before its lease (or the
//!   old lease's deletion) reaches us; a renewal proves the instance was still alive, and two
//!   (kube-apiserver renews every 10 s) leave no doubt that the first was not merely in
//!   flight while the look ran. With one apiserver name, an instance still alive after the
//!   look is the one that answered it.
//!
//! An instance that goes before it was accounted for may have written objects in an encoding
//! nobody saw: the trigger records `Unknown` for every built-in resource and migrates. The same
//! holds for what happened while the trigger was away: instances replaced since its last
//! record, or a downtime longer than `--vouch-window`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::history::{ObserverRecord, SeenInstance};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Instance {
    holder: String,
    first_seen: String,
    accounted: bool,
    /// A look ran while this was the only instance: the renewals received since it ended.
    renewals_since_look: Option<u32>,
}

/// Renewals after a look that account for the instance that answered it.
const RENEWALS_TO_ACCOUNT: u32 = 2;

/// A look in progress: the instance that must have answered it, if exactly one was live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LookTicket {
    sole: Option<(String, String)>,
}

#[derive(Debug, Default)]
pub(crate) struct Instances {
    live: BTreeMap<String, Instance>,
    /// The StorageVersion API is watched and healthy.
    encodings_watched: bool,
    /// Why built-in resources are not vouched for since the last time they were recorded.
    unvouched: Vec<String>,
}

impl Instances {
    /// A lease added or changed. Returns whether a new instance appeared (look again).
    pub(crate) fn applied(&mut self, name: &str, holder: &str) -> bool {
        if holder.is_empty() {
            return false;
        }
        if let Some(old) = self.live.get_mut(name) {
            if old.holder == holder {
                if let Some(renewals) = old.renewals_since_look.as_mut() {
                    *renewals += 1;
                    if *renewals >= RENEWALS_TO_ACCOUNT {
                        old.accounted = true;
                    }
                }
                return false;
            }
            let old = old.clone();
            self.went(name, &old, "was replaced");
        }
        self.live.insert(
            name.to_string(),
            Instance {
                holder: holder.to_string(),
                first_seen: svm_registry::now_text(),
                accounted: self.encodings_watched,
                renewals_since_look: None,
            },
        );
        true
    }

    /// A lease deleted (the instance stopped).
    pub(crate) fn deleted(&mut self, name: &str) {
        if let Some(old) = self.live.remove(name) {
            self.went(name, &old, "stopped");
        }
    }

    /// The lease watch listed anew after a gap: what changed in between is treated as seen
    /// now. Returns whether anything changed.
    pub(crate) fn relisted(&mut self, leases: &[(String, String)]) -> bool {
        let mut changed = false;
        let gone: Vec<String> = self
            .live
            .keys()
            .filter(|name| !leases.iter().any(|(n, _)| n == *name))
            .cloned()
            .collect();
        for name in gone {
            self.deleted(&name);
            changed = true;
        }
        for (name, holder) in leases {
            changed |= self.applied(name, holder);
        }
        changed
    }

    fn went(&mut self, name: &str, instance: &Instance, how: &str) {
        if !instance.accounted && !self.encodings_watched {
            self.unvouched.push(format!(
                "kube-apiserver {name} (instance {}) {how} before the trigger saw what it encodes",
                instance.holder
            ));
        }
    }

    /// The StorageVersion API watch is (or is no longer) healthy.
    pub(crate) fn set_encodings_watched(&mut self, watched: bool) {
        self.encodings_watched = watched;
        if watched {
            for instance in self.live.values_mut() {
                instance.accounted = true;
            }
        }
    }

    pub(crate) fn start_look(&self) -> LookTicket {
        let sole = (self.live.len() == 1)
            .then(|| self.live.iter().next())
            .flatten()
            .map(|(name, i)| (name.clone(), i.holder.clone()));
        LookTicket { sole }
    }

    /// A look completed: if the instance it started with is still the only one, its next
    /// renewals account for it.
    pub(crate) fn finish_look(&mut self, ticket: &LookTicket) {
        let Some((name, holder)) = &ticket.sole else {
            return;
        };
        if self.live.len() == 1
            && let Some(instance) = self.live.get_mut(name)
            && instance.holder == *holder
            && instance.renewals_since_look.is_none()
        {
            instance.renewals_since_look = Some(0);
        }
    }

    /// Every live instance: its name (its identity lease's name, which kube-apiserver hashes
    /// into the `apiserver_id_hash` label of its metrics) and its holder identity (new for
    /// every process).
    pub(crate) fn live_instances(&self) -> Vec<(String, String)> {
        self.live
            .iter()
            .map(|(name, i)| (name.clone(), i.holder.clone()))
            .collect()
    }

    /// The only live instance's name, if there is exactly one (the apiserver a discovery answer
    /// came from).
    pub(crate) fn sole(&self) -> Option<String> {
        (self.live.len() == 1)
            .then(|| self.live.keys().next().cloned())
            .flatten()
    }

    /// Compares the live instances with the record of a previous run: what changed while the
    /// trigger was away cannot be vouched for.
    pub(crate) fn compare_with_record(
        &mut self,
        record: &ObserverRecord,
        away: Option<Duration>,
        vouch_window: Duration,
    ) {
        match away {
            Some(away) if away > vouch_window => self.unvouched.push(format!(
                "the trigger last vouched {}s ago, longer than --vouch-window ({}s)",
                away.as_secs(),
                vouch_window.as_secs()
            )),
            Some(_) => {}
            None => self
                .unvouched
                .push("the trigger's last record has no readable time".into()),
        }
        for (name, seen) in &record.instances {
            match self.live.get_mut(name) {
                Some(live) if live.holder == seen.holder_identity => {
                    live.accounted = true;
                    live.first_seen = seen.first_seen.clone();
                }
                Some(_) => self.unvouched.push(format!(
                    "kube-apiserver {name} restarted while the trigger was away"
                )),
                None => self.unvouched.push(format!(
                    "kube-apiserver {name} stopped while the trigger was away"
                )),
            }
        }
        for name in self.live.keys() {
            if !record.instances.contains_key(name) {
                self.unvouched.push(format!(
                    "kube-apiserver {name} started while the trigger was away"
                ));
            }
        }
    }

    /// Something else the trigger cannot vouch for.
    pub(crate) fn unvouched(&mut self, reason: String) {
        self.unvouched.push(reason);
    }

    /// The reasons gathered since the last call (each becomes an `Unknown` entry for every
    /// built-in resource).
    pub(crate) fn take_unvouched(&mut self) -> Vec<String> {
        std::mem::take(&mut self.unvouched)
    }

    /// Whether every live instance is accounted for (a record may be written).
    pub(crate) fn all_accounted(&self) -> bool {
        self.unvouched.is_empty() && self.live.values().all(|i| i.accounted)
    }

    /// The record of what is vouched for now.
    pub(crate) fn record(&self) -> ObserverRecord {
        ObserverRecord {
            last_vouched: svm_registry::now_text(),
            instances: self
                .live
                .iter()
                .map(|(name, i)| {
                    (
                        name.clone(),
                        SeenInstance {
                            holder_identity: i.holder.clone(),
                            first_seen: i.first_seen.clone(),
                        },
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look, then two renewals: the instance is accounted for.
    fn look_and_renew(instances: &mut Instances, name: &str, holder: &str) {
        let ticket = instances.start_look();
        instances.finish_look(&ticket);
        for _ in 0..RENEWALS_TO_ACCOUNT {
            assert!(
                !instances.applied(name, holder),
                "a renewal is no new instance"
            );
        }
    }

    #[test]
    fn a_single_apiserver_looked_at_after_each_restart_is_vouched_for() {
        let mut instances = Instances::default();
        assert!(instances.applied("apiserver-a", "a_1"));
        // Renewals before any look count for nothing.
        instances.applied("apiserver-a", "a_1");
        instances.applied("apiserver-a", "a_1");
        assert!(!instances.all_accounted());
        look_and_renew(&mut instances, "apiserver-a", "a_1");
        assert!(instances.all_accounted());
        // A restart, looked at and renewed before the next one.
        assert!(instances.applied("apiserver-a", "a_2"));
        assert!(!instances.all_accounted());
        look_and_renew(&mut instances, "apiserver-a", "a_2");
        assert!(instances.applied("apiserver-a", "a_3"));
        assert!(instances.take_unvouched().is_empty());
    }

    /// The race the renewals close: the look ran while a_1 was the only lease we knew of, but
    /// its successor may have answered it; a_1 went before renewing twice.
    #[test]
    fn a_look_without_later_renewals_accounts_for_nothing() {
        let mut instances = Instances::default();
        instances.applied("apiserver-a", "a_1");
        let ticket = instances.start_look();
        instances.finish_look(&ticket);
        instances.applied("apiserver-a", "a_1");
        instances.applied("apiserver-a", "a_2");
        let reasons = instances.take_unvouched();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(reasons[0].contains("a_1"));
    }

    #[test]
    fn an_instance_replaced_before_a_look_is_unvouched() {
        let mut instances = Instances::default();
        instances.applied("apiserver-a", "a_1");
        look_and_renew(&mut instances, "apiserver-a", "a_1");
        // Two restarts between looks: a_2 was never seen.
        instances.applied("apiserver-a", "a_2");
        instances.applied("apiserver-a", "a_3");
        let reasons = instances.take_unvouched();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(reasons[0].contains("a_2"));
        // A look that started before the replacement accounts for nothing.
        let ticket = instances.start_look();
        instances.applied("apiserver-a", "a_4");
        instances.finish_look(&ticket);
        instances.deleted("apiserver-a");
        assert_eq!(instances.take_unvouched().len(), 2);
    }

    #[test]
    fn several_apiservers_without_the_storage_version_api_are_never_accounted_by_looks() {
        let mut instances = Instances::default();
        instances.applied("apiserver-a", "a_1");
        instances.applied("apiserver-b", "b_1");
        let ticket = instances.start_look();
        instances.finish_look(&ticket);
        assert!(!instances.all_accounted());
        instances.applied("apiserver-b", "b_2");
        assert_eq!(instances.take_unvouched().len(), 1);
        // With the StorageVersion API watched, every instance is.
        instances.set_encodings_watched(true);
        assert!(instances.all_accounted());
        instances.applied("apiserver-a", "a_2");
        instances.deleted("apiserver-b");
        assert!(instances.take_unvouched().is_empty());
    }

    #[test]
    fn a_relist_after_a_gap_counts_what_changed() {
        let mut instances = Instances::default();
        instances.applied("apiserver-a", "a_1");
        instances.applied("apiserver-b", "b_1");
        instances.set_encodings_watched(true);
        instances.set_encodings_watched(false);
        assert!(!instances.relisted(&[
            ("apiserver-a".into(), "a_1".into()),
            ("apiserver-b".into(), "b_1".into())
        ]));
        assert!(instances.relisted(&[("apiserver-a".into(), "a_2".into())]));
        // b stopped and a was replaced, both accounted for before: nothing unvouched.
        assert!(instances.take_unvouched().is_empty());
        assert_eq!(instances.sole().as_deref(), Some("apiserver-a"));
    }

    #[test]
    fn what_changed_while_away_is_unvouched() {
        let mut record = ObserverRecord::default();
        for (name, holder) in [
            ("apiserver-a", "a_1"),
            ("apiserver-b", "b_1"),
            ("apiserver-c", "c_1"),
        ] {
            record.instances.insert(
                name.into(),
                SeenInstance {
                    holder_identity: holder.into(),
                    first_seen: "t".into(),
                },
            );
        }
        let mut instances = Instances::default();
        instances.applied("apiserver-a", "a_1");
        instances.applied("apiserver-b", "b_2");
        instances.applied("apiserver-d", "d_1");
        instances.compare_with_record(
            &record,
            Some(Duration::from_secs(60)),
            Duration::from_secs(3600),
        );
        let reasons = instances.take_unvouched();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("apiserver-b restarted")));
        assert!(reasons.iter().any(|r| r.contains("apiserver-c stopped")));
        assert!(reasons.iter().any(|r| r.contains("apiserver-d started")));

        // Same instances, a short absence: vouched for.
        let mut instances = Instances::default();
        instances.applied("apiserver-a", "a_1");
        let mut same = ObserverRecord::default();
        same.instances.insert(
            "apiserver-a".into(),
            record.instances["apiserver-a"].clone(),
        );
        instances.compare_with_record(
            &same,
            Some(Duration::from_secs(60)),
            Duration::from_secs(3600),
        );
        assert!(instances.take_unvouched().is_empty());
        assert!(instances.all_accounted());
        // Too long away: not.
        instances.compare_with_record(
            &same,
            Some(Duration::from_secs(7200)),
            Duration::from_secs(3600),
        );
        assert!(instances.take_unvouched()[0].contains("--vouch-window"));
    }
}

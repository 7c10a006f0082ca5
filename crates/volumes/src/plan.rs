//! What a VolumeClaimMigration should do next, decided from what the cluster shows: a pure
//! function of the migration, the target's claims, their StorageClasses and pods, and the
//! time, so that every rule is unit-tested without a cluster. The controller
//! (`super::Controller`) reads the cluster, calls [`plan`], performs the actions and writes
//! the status.

use std::collections::BTreeMap;
use std::time::Duration;

use super::recreate::{self, Mode, Next};
use super::template::TemplateTarget;
use svm_api::volumes::{
    ClaimStatus, FAILED, ON_DELETE, PAUSED, RECREATE_DONE, RUNNING, RecreateStatus, SUCCEEDED,
    TemplateStatus, VolumeClaimMigration, VolumeClaimMigrationStatus, quantity_bytes,
};

/// Claim phases (`status.claims[].phase`).
pub(crate) const PENDING: &str = "Pending";
pub(crate) const RESIZING: &str = "Resizing";
pub(crate) const FS_RESIZE_PENDING: &str = "FileSystemResizePending";
pub(crate) const RESIZED: &str = "Resized";
pub(crate) const CLAIM_FAILED: &str = "Failed";

/// A PersistentVolumeClaim as the planner needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClaimView {
    pub uid: String,
    /// As read: the resize's precondition.
    pub resource_version: String,
    pub storage_class: Option<String>,
    pub requested: String,
    pub capacity: String,
    /// Condition `FileSystemResizePending=True`: the volume grew, the file system grows when
    /// the pod restarts.
    pub fs_resize_pending: bool,
    /// `status.allocatedResourceStatuses.storage` said `...Infeasible`: the resize cannot
    /// succeed as asked (a clear error).
    pub infeasible: Option<String>,
}

impl ClaimView {
    fn requested_bytes(&self) -> Option<u128> {
        quantity_bytes(&self.requested)
    }
    fn capacity_bytes(&self) -> Option<u128> {
        quantity_bytes(&self.capacity)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodView {
    pub uid: String,
    pub ready: bool,
}

/// What the cluster shows for one migration.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observed {
    pub replicas: i32,
    pub templates: Vec<TemplateTarget>,
    /// By claim name; absent: the claim does not exist (yet).
    pub claims: BTreeMap<String, ClaimView>,
    /// StorageClass name → `allowVolumeExpansion`; absent: the class does not exist.
    pub storage_classes: BTreeMap<String, bool>,
    /// By pod name.
    pub pods: BTreeMap<String, PodView>,
    /// The StatefulSet itself; absent while it is being replaced (`spec.recreateStatefulSet`).
    pub statefulset: Option<super::recreate::Seen>,
    /// When it is absent: how its pods were left.
    pub pods_left: super::recreate::PodsLeft,
}

/// What the controller does, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Merge-patch the claim's `spec.resources.requests.storage`, if it is still at this
    /// resourceVersion (the claim as read: never a replacement, never over a user's edit).
    Resize {
        claim: String,
        storage: String,
        resource_version: String,
    },
    /// Delete the pod so that its file system is resized when it starts again, if it still
    /// has this uid (the pod as read: never its replacement).
    RestartPod {
        pod: String,
        uid: String,
        claim: String,
    },
    /// Delete the StatefulSet with orphan cascade, if it still has this uid and this
    /// resourceVersion (the object the saved manifest was made from).
    DeleteStatefulSet {
        uid: String,
        resource_version: String,
    },
    /// Create the StatefulSet saved in `status.recreate`.
    CreateStatefulSet { manifest: serde_json::Value },
}

/// An Event to record, on the migration and on the StatefulSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Plan {
    pub status: VolumeClaimMigrationStatus,
    pub actions: Vec<Action>,
    pub notes: Vec<Note>,
    /// The status saves a StatefulSet manifest (first, or again after an edit): this pass's
    /// status write is a step of the re-create.
    pub saves_manifest: bool,
}

impl Plan {
    /// Our deletion of the old StatefulSet found it gone (404): someone else deleted it. The
    /// saved manifest is dropped, and the migration fails saying why (as [`Next::Abandon`]
    /// does when a pass finds it so).
    pub(crate) fn abandon_recreate(&mut self, generation: Option<i64>, now: jiff::Timestamp) {
        self.status.recreate = None;
        let note = abandoned();
        let refused = Outcome::Refused(Refusal {
            reason: note.reason,
            message: note.message.clone(),
        });
        set_outcome(&mut self.status.conditions, &refused, generation, now);
        self.notes.push(note);
    }

    /// The migration must hold [`svm_api::volumes::RECREATE_FINALIZER`] once this plan's
    /// status is written: it holds a saved manifest.
    pub(crate) fn needs_finalizer(&self) -> bool {
        recreate::holds_manifest(&self.status)
    }
}

/// The conditions `outcome` sets (one place: a pass's plan and a re-create abandoned after it).
fn set_outcome(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    outcome: &Outcome,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let mut set = |type_: &str, on: bool, reason: &str, message: &str| {
        svm_api::conditions::set(conditions, type_, on, reason, message, generation, now)
    };
    match outcome {
        Outcome::Paused => {
            set(PAUSED, true, "Paused", "spec.paused: nothing is patched");
            set(RUNNING, false, "Paused", "spec.paused");
        }
        Outcome::Refused(refusal) => {
            set(PAUSED, false, "Resumed", "");
            set(FAILED, true, refusal.reason, &refusal.message);
            set(RUNNING, false, refusal.reason, &refusal.message);
        }
        Outcome::Blocked(message) => {
            set(PAUSED, false, "Resumed", "");
            set(FAILED, false, "Blocked", "retried on every pass");
            set(RUNNING, false, "Blocked", message);
        }
        Outcome::TimedOut(message) => {
            set(PAUSED, false, "Resumed", "");
            set(FAILED, true, "ResizeTimedOut", message);
            set(RUNNING, false, "ResizeTimedOut", message);
        }
        Outcome::Done => {
            set(PAUSED, false, "Resumed", "");
            set(FAILED, false, "Resized", "");
            set(RUNNING, false, "Succeeded", "every claim is resized");
            set(SUCCEEDED, true, "Resized", "every claim is resized");
        }
        Outcome::InProgress => {
            set(PAUSED, false, "Resumed", "");
            set(FAILED, false, "Resizing", "");
            set(
                RUNNING,
                true,
                "Resizing",
                "claims are resized, highest ordinal first",
            );
            set(SUCCEEDED, false, "Resizing", "");
        }
        Outcome::Recreating(message) => {
            set(PAUSED, false, "Resumed", "");
            set(FAILED, false, "Resized", "");
            set(RUNNING, true, "RecreatingStatefulSet", message);
            set(SUCCEEDED, false, "RecreatingStatefulSet", "");
        }
    }
}

/// The Event of a re-create given up because someone else deleted the StatefulSet.
pub(crate) fn abandoned() -> Note {
    Note {
        warning: true,
        reason: "StatefulSetDeletedElsewhere",
        message: "the StatefulSet was deleted, not by this migration (its pods were deleted \
                  with it, or were being): it is not created again, and the saved manifest is \
                  dropped"
            .into(),
    }
}

/// The claim of `template` for `ordinal` (the StatefulSet controller's naming).
pub(crate) fn claim_name(template: &str, statefulset: &str, ordinal: i32) -> String {
    format!("{template}-{statefulset}-{ordinal}")
}

pub(crate) fn pod_name(statefulset: &str, ordinal: i32) -> String {
    format!("{statefulset}-{ordinal}")
}

/// Decides the next step of `vcm` at `now` (RFC 3339, as written into the status).
///
/// A re-create whose old StatefulSet is deleted (or being deleted) is always finished —
/// paused, refused, resizing again or being deleted, the saved StatefulSet is created — so that
/// no state of the migration leaves the StatefulSet missing.
pub(crate) fn plan(vcm: &VolumeClaimMigration, observed: &Observed, now: jiff::Timestamp) -> Plan {
    let mut planner = Planner::new(vcm, observed, now);
    let in_flight = recreate::in_flight(vcm.status.recreate.as_ref());
    if vcm.metadata.deletion_timestamp.is_some() {
        // Being deleted (our finalizer holds it only while a manifest is saved): finish or
        // call off the re-create, touch nothing else.
        planner.claims_as_they_are();
        if in_flight && let Outcome::Recreating(reason) = planner.recreate(Mode::CallOff) {
            planner.set_conditions(Outcome::Recreating(reason));
        }
        return planner.finish();
    }
    if vcm.spec.paused {
        planner.claims_as_they_are();
        if in_flight {
            planner.recreate(Mode::Hold);
        }
        planner.set_conditions(Outcome::Paused);
        return planner.finish();
    }
    if let Some(refusal) = planner.refusal() {
        planner.claims_as_they_are();
        if in_flight {
            planner.recreate(Mode::Hold);
        }
        planner.set_conditions(Outcome::Refused(refusal));
        return planner.finish();
    }
    let mut outcome = planner.roll_out();
    let mode = match (vcm.spec.recreate_stateful_set, &outcome) {
        (false, _) => Mode::CallOff,
        (true, Outcome::Done) => Mode::Go,
        (true, _) => Mode::Hold,
    };
    if mode == Mode::Go || in_flight {
        let step = planner.recreate(mode);
        if matches!(outcome, Outcome::Done) {
            outcome = step;
        }
    }
    planner.set_conditions(outcome);
    planner.finish()
}

/// Why nothing may be patched.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    reason: &'static str,
    message: String,
}

enum Outcome {
    Paused,
    Refused(Refusal),
    /// A clear error stopped the rollout at a claim; it is tried again on the next pass.
    Blocked(String),
    /// An ambiguous failure outlived `maxWaitTime`: a person must act.
    TimedOut(String),
    Done,
    InProgress,
    /// Every claim is resized; the StatefulSet is being replaced (the reason says how far).
    Recreating(&'static str),
}

struct Planner<'a> {
    vcm: &'a VolumeClaimMigration,
    observed: &'a Observed,
    now: jiff::Timestamp,
    statefulset: &'a str,
    max_wait: Duration,
    /// The previous status's entries, by claim name.
    before: BTreeMap<&'a str, &'a ClaimStatus>,
    claims: Vec<ClaimStatus>,
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    recreate: Option<RecreateStatus>,
    saves_manifest: bool,
    actions: Vec<Action>,
    notes: Vec<Note>,
}

impl<'a> Planner<'a> {
    fn new(vcm: &'a VolumeClaimMigration, observed: &'a Observed, now: jiff::Timestamp) -> Self {
        let max_wait = svm_registry::duration::go_duration(&vcm.spec.max_wait_time)
            .unwrap_or(Duration::from_secs(60));
        Planner {
            vcm,
            observed,
            now,
            statefulset: &vcm.spec.target.name,
            max_wait,
            before: vcm
                .status
                .claims
                .iter()
                .map(|c| (c.name.as_str(), c))
                .collect(),
            claims: Vec::new(),
            conditions: vcm.status.conditions.clone(),
            recreate: vcm.status.recreate.clone(),
            saves_manifest: false,
            actions: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn ordinals(&self) -> impl Iterator<Item = i32> {
        // Highest first, as a StatefulSet's rolling update.
        (0..self.observed.replicas.max(0)).rev()
    }

    /// A non-expandable StorageClass or a pure shrink stops everything up front.
    fn refusal(&self) -> Option<Refusal> {
        for template in &self.observed.templates {
            if !template.in_target {
                return Some(Refusal {
                    reason: "UnknownTemplate",
                    message: format!(
                        "the StatefulSet has no volumeClaimTemplate {:?}",
                        template.name
                    ),
                });
            }
            if template.template_bytes.is_some_and(|t| template.bytes < t) {
                return Some(Refusal {
                    reason: "ShrinkNotAllowed",
                    message: format!(
                        "template {}: {} is below the StatefulSet's own size; volumes only grow",
                        template.name, template.storage
                    ),
                });
            }
            let mut smallest: Option<u128> = None;
            for ordinal in self.ordinals() {
                let name = claim_name(&template.name, self.statefulset, ordinal);
                let Some(claim) = self.observed.claims.get(&name) else {
                    continue;
                };
                if let Some(refusal) = self.class_refusal(&name, claim, template) {
                    return Some(refusal);
                }
                if let Some(capacity) = claim.capacity_bytes() {
                    smallest = Some(smallest.map_or(capacity, |s| s.min(capacity)));
                }
            }
            if smallest.is_some_and(|s| template.bytes < s) {
                return Some(Refusal {
                    reason: "ShrinkNotAllowed",
                    message: format!(
                        "template {}: {} is below every claim's capacity; volumes only grow",
                        template.name, template.storage
                    ),
                });
            }
        }
        None
    }

    /// A claim that must grow needs a StorageClass that allows expansion.
    fn class_refusal(
        &self,
        name: &str,
        claim: &ClaimView,
        template: &TemplateTarget,
    ) -> Option<Refusal> {
        if claim.capacity_bytes().is_some_and(|c| c >= template.bytes) {
            return None;
        }
        let class = claim.storage_class.as_deref().unwrap_or_default();
        match self.observed.storage_classes.get(class) {
            Some(true) => None,
            Some(false) => Some(Refusal {
                reason: "ExpansionNotAllowed",
                message: format!(
                    "claim {name}: StorageClass {class} does not allow volume expansion \
                     (allowVolumeExpansion is not true)"
                ),
            }),
            None => Some(Refusal {
                reason: "ExpansionNotAllowed",
                message: format!(
                    "claim {name}: StorageClass {class:?} not found; only a class that allows \
                     volume expansion can grow a claim"
                ),
            }),
        }
    }

    /// Paused or refused: report every claim, touch none.
    fn claims_as_they_are(&mut self) {
        for ordinal in self.ordinals().collect::<Vec<_>>() {
            for template in &self.observed.templates {
                let name = claim_name(&template.name, self.statefulset, ordinal);
                let entry = self.entry(&name, template, ordinal);
                self.claims.push(entry);
            }
        }
    }

    /// The claim's status entry as it stands, before any action of this pass.
    fn entry(&self, name: &str, template: &TemplateTarget, ordinal: i32) -> ClaimStatus {
        let before = self.before.get(name);
        let mut entry = ClaimStatus {
            name: name.to_string(),
            template: template.name.clone(),
            ordinal,
            ..Default::default()
        };
        if let Some(before) = before {
            entry.uid = before.uid.clone();
            entry.resize_start_time = before.resize_start_time.clone();
            entry.restarted_pod_uid = before.restarted_pod_uid.clone();
            entry.last_error = before.last_error.clone();
        }
        let Some(claim) = self.observed.claims.get(name) else {
            entry.phase = PENDING.into();
            return entry;
        };
        if entry.uid.is_empty() {
            entry.uid = claim.uid.clone();
        }
        entry.requested = claim.requested.clone();
        entry.capacity = claim.capacity.clone();
        entry.phase = if claim.capacity_bytes().is_some_and(|c| c >= template.bytes) {
            RESIZED.into()
        } else if claim.requested_bytes().is_some_and(|r| r >= template.bytes) {
            if claim.fs_resize_pending {
                FS_RESIZE_PENDING.into()
            } else {
                RESIZING.into()
            }
        } else {
            PENDING.into()
        };
        entry
    }

    /// Every ordinal, highest first: claims already resized are counted; a resize in flight
    /// is followed (pod restart, timeout); the next ordinals start while fewer than
    /// `maxUnavailable` are in flight and nothing failed.
    fn roll_out(&mut self) -> Outcome {
        let on_delete = self.vcm.spec.strategy() == ON_DELETE;
        let max_unavailable = self.vcm.spec.max_unavailable.unwrap_or(1).max(1);
        let mut in_flight = 0;
        let mut stopped: Option<Outcome> = None;
        for ordinal in self.ordinals().collect::<Vec<_>>() {
            let mut open = false;
            for template in self.observed.templates.clone() {
                let name = claim_name(&template.name, self.statefulset, ordinal);
                let mut entry = self.entry(&name, &template, ordinal);
                let may_start = stopped.is_none() && in_flight < max_unavailable;
                match self.step(&mut entry, &template, may_start, on_delete) {
                    Step::Done | Step::Waiting => {}
                    Step::InFlight => open = true,
                    Step::Blocked(message) => {
                        open = true;
                        stopped.get_or_insert(Outcome::Blocked(message));
                    }
                    Step::TimedOut(message) => {
                        open = true;
                        stopped.get_or_insert(Outcome::TimedOut(message));
                    }
                }
                self.claims.push(entry);
            }
            in_flight += i32::from(open);
        }
        match stopped {
            Some(stopped) => stopped,
            None if self.all_resized() => Outcome::Done,
            None => Outcome::InProgress,
        }
    }

    /// One claim's next step. `may_start`: the rollout has room for another ordinal.
    fn step(
        &mut self,
        entry: &mut ClaimStatus,
        template: &TemplateTarget,
        may_start: bool,
        on_delete: bool,
    ) -> Step {
        let Some(claim) = self.observed.claims.get(&entry.name).cloned() else {
            return Step::Waiting;
        };
        if claim.capacity_bytes().is_some_and(|c| c >= template.bytes) {
            return self.resized(entry, &claim);
        }
        if claim.requested_bytes() == Some(template.bytes) {
            // An infeasible mark stays until the request changes: it is about this size.
            if let Some(message) = &claim.infeasible {
                entry.phase = CLAIM_FAILED.into();
                entry.last_error = message.clone();
                return Step::Blocked(format!("claim {}: {message}", entry.name));
            }
            return self.follow(entry, &claim);
        }
        // Below the size, or above it after a failed resize whose spec was lowered (with
        // RecoverVolumeExpansionFailure a request may come down to any size ≥ capacity).
        let recreated = !entry.uid.is_empty() && entry.uid != claim.uid;
        let eligible = if on_delete { recreated } else { may_start };
        if !eligible {
            return Step::Waiting;
        }
        if claim.capacity.is_empty() {
            // Not bound yet (a claim just made again from its template): kube-apiserver
            // refuses a new request on an unbound claim. Its turn waits for the binder.
            return Step::InFlight;
        }
        entry.uid = claim.uid.clone();
        self.actions.push(Action::Resize {
            claim: entry.name.clone(),
            storage: template.storage.clone(),
            resource_version: claim.resource_version.clone(),
        });
        entry.requested = template.storage.clone();
        entry.phase = RESIZING.into();
        entry.resize_start_time = self.now.to_string();
        entry.restarted_pod_uid.clear();
        entry.last_error.clear();
        Step::InFlight
    }

    /// A resize issued and not finished: the pod restart a file-system resize needs, or the
    /// wait for capacity, bounded by `maxWaitTime`.
    fn follow(&mut self, entry: &mut ClaimStatus, claim: &ClaimView) -> Step {
        if claim.fs_resize_pending {
            entry.phase = FS_RESIZE_PENDING.into();
            self.restart_pod_once(entry);
            return Step::InFlight;
        }
        entry.phase = RESIZING.into();
        if entry.resize_start_time.is_empty() {
            entry.resize_start_time = self.now.to_string();
        }
        let started = entry
            .resize_start_time
            .parse::<jiff::Timestamp>()
            .unwrap_or(self.now);
        let limit = jiff::SignedDuration::try_from(self.max_wait).unwrap_or_default();
        if self.now.duration_since(started) <= limit {
            return Step::InFlight;
        }
        entry.phase = CLAIM_FAILED.into();
        entry.last_error = format!(
            "not resized within maxWaitTime ({:?}): no capacity change and no error reported; \
             back up, then delete the claim and its pod, or switch to OnDelete",
            self.max_wait
        );
        Step::TimedOut(format!("claim {}: {}", entry.name, entry.last_error))
    }

    /// The pod is deleted once per resize (its uid is remembered): the StatefulSet controller
    /// starts it again and the kubelet grows the file system.
    fn restart_pod_once(&mut self, entry: &mut ClaimStatus) {
        let pod = pod_name(self.statefulset, entry.ordinal);
        let Some(running) = self.observed.pods.get(&pod) else {
            return;
        };
        if entry.restarted_pod_uid.is_empty() {
            entry.restarted_pod_uid = running.uid.clone();
            self.actions.push(Action::RestartPod {
                pod,
                uid: running.uid.clone(),
                claim: entry.name.clone(),
            });
        }
    }

    /// Capacity reached. A file-system resize is done once the pod deleted for it came back
    /// (a new uid) and is ready.
    fn resized(&mut self, entry: &mut ClaimStatus, claim: &ClaimView) -> Step {
        if claim.fs_resize_pending {
            entry.phase = FS_RESIZE_PENDING.into();
            self.restart_pod_once(entry);
            return Step::InFlight;
        }
        if !entry.restarted_pod_uid.is_empty() {
            let pod = pod_name(self.statefulset, entry.ordinal);
            let back = self
                .observed
                .pods
                .get(&pod)
                .is_some_and(|p| p.uid != entry.restarted_pod_uid && p.ready);
            if !back {
                entry.phase = FS_RESIZE_PENDING.into();
                return Step::InFlight;
            }
        }
        entry.phase = RESIZED.into();
        entry.last_error.clear();
        Step::Done
    }

    /// The StatefulSet's replacement takes its next step, as far as `mode` lets it.
    fn recreate(&mut self, mode: Mode) -> Outcome {
        let next = recreate::next(
            self.recreate.as_ref(),
            self.observed.statefulset.as_ref(),
            self.observed.pods_left,
            &self.observed.templates,
            mode,
        );
        match next {
            Next::Done(status) => {
                self.recreate_done(status);
                return Outcome::Done;
            }
            Next::CallOff => {
                self.recreate = None;
                self.notes.push(Note {
                    warning: false,
                    reason: "RecreateCalledOff",
                    message: "the StatefulSet was not deleted yet and the migration is being \
                              deleted or no longer asks for a re-create: the saved manifest is \
                              dropped, the StatefulSet stays as it is"
                        .into(),
                });
                return Outcome::Done;
            }
            Next::Abandon => return self.abandon_recreate_now(),
            Next::Wait(reason) => return Outcome::Recreating(reason),
            Next::Save(status) => {
                self.recreate = Some(status);
                self.saves_manifest = true;
            }
            Next::Delete {
                uid,
                resource_version,
            } => self.actions.push(Action::DeleteStatefulSet {
                uid,
                resource_version,
            }),
            Next::Create { manifest } => self.actions.push(Action::CreateStatefulSet { manifest }),
        }
        Outcome::Recreating("re-creating the StatefulSet so that its templates say the new sizes")
    }

    /// The re-create is over (`status` its last state): said once, when it has just ended.
    fn recreate_done(&mut self, status: Option<RecreateStatus>) {
        let ended_now = status.as_ref().is_some_and(|s| s.phase == RECREATE_DONE)
            && self
                .recreate
                .as_ref()
                .is_none_or(|s| s.phase != RECREATE_DONE);
        if ended_now {
            self.notes.push(Note {
                warning: false,
                reason: "StatefulSetRecreated",
                message: "the StatefulSet was re-created with the new volumeClaimTemplates; \
                          its pods and claims were kept"
                    .into(),
            });
        }
        self.recreate = status;
    }

    /// The re-create cannot go on: the saved manifest is dropped and the migration refused.
    fn abandon_recreate_now(&mut self) -> Outcome {
        self.recreate = None;
        let note = abandoned();
        let refusal = Refusal {
            reason: note.reason,
            message: note.message.clone(),
        };
        self.notes.push(note);
        Outcome::Refused(refusal)
    }

    fn all_resized(&self) -> bool {
        let replicas = usize::try_from(self.observed.replicas.max(0)).unwrap_or(0);
        self.claims.len() == replicas * self.observed.templates.len()
            && self.claims.iter().all(|c| c.phase == RESIZED)
    }

    /// Counts per template: claims whose resize was issued (or that need none), and claims
    /// resized.
    fn template_counts(&self) -> Vec<TemplateStatus> {
        let issued = [RESIZING, FS_RESIZE_PENDING, RESIZED];
        self.observed
            .templates
            .iter()
            .map(|t| {
                let of = || self.claims.iter().filter(|c| c.template == t.name);
                TemplateStatus {
                    template_name: t.name.clone(),
                    compatible_replicas: count(of().filter(|c| issued.contains(&c.phase.as_str()))),
                    compatible_ready_replicas: count(of().filter(|c| c.phase == RESIZED)),
                }
            })
            .collect()
    }

    fn set_conditions(&mut self, outcome: Outcome) {
        let generation = self.vcm.metadata.generation;
        set_outcome(&mut self.conditions, &outcome, generation, self.now);
    }

    /// Events for what changed since the last status: a condition that turned, a claim that
    /// finished.
    fn notes_for_changes(&mut self) {
        let before = &self.vcm.status.conditions;
        for condition in &self.conditions {
            let was = before.iter().find(|c| c.type_ == condition.type_);
            let turned =
                was.is_none_or(|w| w.status != condition.status || w.reason != condition.reason);
            if !turned {
                continue;
            }
            let note = match (condition.type_.as_str(), condition.status.as_str()) {
                (FAILED, "True") => Some(true),
                (SUCCEEDED, "True") => Some(false),
                (RUNNING, "False") if condition.reason == "Blocked" => Some(true),
                (RUNNING, "True") if was.is_some_and(|w| w.reason == "Blocked") => Some(false),
                _ => None,
            };
            if let Some(warning) = note {
                let reason = match (condition.type_.as_str(), condition.reason.as_str()) {
                    (RUNNING, "Blocked") => "ResizeFailed",
                    (RUNNING, _) => "Resumed",
                    (SUCCEEDED, _) => "Succeeded",
                    (_, "ExpansionNotAllowed") => "ExpansionNotAllowed",
                    (_, "ShrinkNotAllowed") => "ShrinkNotAllowed",
                    (_, "UnknownTemplate") => "UnknownTemplate",
                    _ => "ResizeTimedOut",
                };
                self.notes.push(Note {
                    warning,
                    reason,
                    message: condition.message.clone(),
                });
            }
        }
        for claim in &self.claims {
            let was = self
                .before
                .get(claim.name.as_str())
                .map(|c| c.phase.as_str());
            if claim.phase == RESIZED && was.is_some_and(|p| p != RESIZED) {
                self.notes.push(Note {
                    warning: false,
                    reason: "Resized",
                    message: format!("claim {} has {}", claim.name, claim.capacity),
                });
            }
        }
    }

    fn finish(mut self) -> Plan {
        self.notes_for_changes();
        let status = VolumeClaimMigrationStatus {
            observed_generation: self.vcm.metadata.generation,
            templates: self.template_counts(),
            claims: self.claims,
            conditions: self.conditions,
            recreate: self.recreate,
        };
        Plan {
            status,
            actions: self.actions,
            notes: self.notes,
            saves_manifest: self.saves_manifest,
        }
    }
}

enum Step {
    /// Resized.
    Done,
    /// Nothing to do yet (no claim, or not its turn).
    Waiting,
    /// A resize issued and not finished.
    InFlight,
    /// A clear error: the rollout stops here and tries again on the next pass.
    Blocked(String),
    /// `maxWaitTime` passed: the rollout waits for a person.
    TimedOut(String),
}

fn count<T>(items: impl Iterator<Item = T>) -> i32 {
    i32::try_from(items.count()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests;

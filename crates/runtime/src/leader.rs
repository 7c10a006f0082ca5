//! Leader election between replicas, so the controllers run on one of them (the record at
//! `<prefix>/leader`; docs/design.md, "Leadership and the fence"). The algorithm is
//! client-go's Lease-based election, kept in our own store (etcd or embedded) with
//! compare-and-swap on the record's mod revision:
//!
//! - the holder renews the record every `retry_period`; if it cannot renew for
//!   `renew_deadline` it stops leading at once (its controllers are cancelled). Every store call
//!   of a renewal is bounded by what is left of the deadline, so a hung store cannot keep a
//!   replica leading past it;
//! - a candidate takes over only after it has watched the record stay unchanged for
//!   `lease_duration` by its own clock — no comparison of wall clocks between machines;
//! - a leader that shuts down deletes the record, so another replica takes over at once.
//!
//! Timing alone cannot stop a replica that was paused (a GC pause, SIGSTOP, a partition) from
//! writing after its lease lapsed. So every change of holder also writes the term record
//! (`<prefix>/leader-term`) in the same transaction, and the controllers of a term write only
//! through its [`Fence`]: each of their writes compares the term record's mod revision in its
//! own transaction (see `registry::fence`). A refused write ends the term at once.
//!
//! (An etcd lease with keep-alive would tie expiry to etcd's clock, but the embedded store has
//! no leases; the CAS record works on both with the same guarantees client-go gives.)

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use svm_registry::Fence;
use svm_registry::fence::term_key;
use svm_storage::{Compare, KeyValue, Op, Revision, Storage, Txn, TxnOutcome};

/// How this replica takes part in the election (flags of `serve`).
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// This replica's identity (pod name, or hostname plus a random suffix).
    pub identity: String,
    /// How long a leader record holds without renewal (`--leader-elect-lease-duration`).
    pub lease_duration: Duration,
    /// How long the leader may fail to renew before it steps down (`--leader-elect-renew-deadline`).
    pub renew_deadline: Duration,
    /// How often a replica tries to take or renew the record (`--leader-elect-retry-period`).
    pub retry_period: Duration,
}

/// The record under `<prefix>/leader` (the fields of a coordination.k8s.io Lease's spec).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LeaderRecord {
    pub holder_identity: String,
    pub lease_duration_seconds: u64,
    /// RFC 3339, for operators; never compared across machines.
    pub acquire_time: String,
    pub renew_time: String,
    pub leader_transitions: u64,
}

/// The record under `<prefix>/leader-term`: written only when the holder changes, so its mod
/// revision names the term (the fence of the term's writes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TermRecord {
    pub holder_identity: String,
    pub acquire_time: String,
    pub leader_transitions: u64,
}

/// Elects one leader among the replicas through a record in our store; the leader runs the controllers, fenced by its term.
pub struct LeaderElector {
    storage: std::sync::Arc<dyn Storage>,
    prefix: String,
    key: String,
    term_key: String,
    config: ElectionConfig,
    /// The last record seen held by someone else: its mod revision and when we first saw it.
    observed: Option<(Revision, Instant)>,
    /// Our record's mod revision while we hold it.
    held: Option<Revision>,
    /// The revision our term began at (the term record's mod revision) while we hold it.
    term: Option<Revision>,
    transitions: u64,
    acquired_at: String,
}

impl LeaderElector {
    /// An elector over `<prefix>/leader` in `storage`.
    pub fn new(storage: std::sync::Arc<dyn Storage>, prefix: &str, config: ElectionConfig) -> Self {
        Self {
            storage,
            prefix: prefix.trim_end_matches('/').to_string(),
            key: format!("{}/leader", prefix.trim_end_matches('/')),
            term_key: term_key(prefix),
            config,
            observed: None,
            held: None,
            term: None,
            transitions: 0,
            acquired_at: String::new(),
        }
    }

    fn term_record(&self) -> Vec<u8> {
        let record = TermRecord {
            holder_identity: self.config.identity.clone(),
            acquire_time: self.acquired_at.clone(),
            leader_transitions: self.transitions,
        };
        serde_json::to_vec(&record).unwrap_or_default()
    }

    /// The fence of the current term, cancelled with `token`.
    fn fence(&self, token: CancellationToken) -> Option<Fence> {
        self.term.map(|revision| {
            Fence::for_term(
                self.storage.clone(),
                &self.prefix,
                &self.config.identity,
                revision,
                token,
            )
        })
    }

    /// Forget the term (lost, or given up).
    fn step_down(&mut self) {
        self.held = None;
        self.term = None;
    }

    fn record(&self) -> Vec<u8> {
        let record = LeaderRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: self.config.lease_duration.as_secs(),
            acquire_time: self.acquired_at.clone(),
            renew_time: svm_registry::now_text(),
            leader_transitions: self.transitions,
        };
        serde_json::to_vec(&record).unwrap_or_default()
    }

    /// One attempt to acquire or renew; true while we hold the lease.
    pub async fn try_acquire_or_renew(&mut self) -> bool {
        let current = match self.storage.get(&self.key).await {
            Ok(current) => current,
            Err(err) => {
                tracing::debug!(error = %err, "reading the leader record failed");
                return false;
            }
        };
        let compare = match &current {
            None => {
                self.step_down();
                self.acquired_at = svm_registry::now_text();
                Compare::Absent(self.key.clone())
            }
            Some(kv) => {
                if !self.may_write_over(kv) {
                    return false;
                }
                Compare::ModRevision(self.key.clone(), kv.mod_revision)
            }
        };
        self.write_record(compare).await
    }

    /// Whether the record `kv` may be written over: it is ours, or its holder left it
    /// unchanged for a whole lease duration (then this replica takes over).
    fn may_write_over(&mut self, kv: &KeyValue) -> bool {
        let record: Option<LeaderRecord> = serde_json::from_slice(&kv.value).ok();
        // Only this process writes its identity (it carries a random suffix), so a record
        // naming us while our term lasts is ours — even when the answer to our last renewal
        // was lost and its mod revision is new to us.
        let ours = self.term.is_some()
            && record
                .as_ref()
                .is_some_and(|r| r.holder_identity == self.config.identity);
        if ours {
            return true;
        }
        self.step_down();
        let now = Instant::now();
        match self.observed {
            Some((revision, since)) if revision == kv.mod_revision => {
                if now.duration_since(since) < self.config.lease_duration {
                    return false;
                }
            }
            _ => {
                self.observed = Some((kv.mod_revision, now));
                return false;
            }
        }
        // Unchanged for a whole lease duration: the holder is gone.
        self.transitions = record.map_or(0, |r| r.leader_transitions + 1);
        self.acquired_at = svm_registry::now_text();
        true
    }

    /// Writes our record if `compare` still holds (and, for a new term, the term record);
    /// true when it did.
    async fn write_record(&mut self, compare: Compare) -> bool {
        let acquiring = self.term.is_none();
        let mut ops = vec![Op::Put(self.key.clone(), self.record())];
        if acquiring {
            // A new term: its record changes with the holder, and only then.
            ops.push(Op::Put(self.term_key.clone(), self.term_record()));
        }
        let txn = Txn {
            compares: vec![compare],
            ops,
        };
        match self.storage.txn(txn).await {
            Ok(TxnOutcome::Committed { revision }) => {
                if acquiring {
                    tracing::info!(identity = %self.config.identity, term = revision, "became the leader");
                    self.term = Some(revision);
                }
                self.held = Some(revision);
                self.observed = None;
                true
            }
            Ok(TxnOutcome::Failed { .. }) => {
                self.step_down();
                false
            }
            Err(err) => {
                tracing::debug!(error = %err, "writing the leader record failed");
                // Unknown outcome: we may still hold it, but act as if not until we read it.
                false
            }
        }
    }

    /// [`try_acquire_or_renew`](Self::try_acquire_or_renew), given up after `bound`: a store
    /// call that hangs counts as a failed attempt.
    async fn attempt_within(&mut self, bound: Duration) -> bool {
        tokio::time::timeout(bound, self.try_acquire_or_renew())
            .await
            .unwrap_or_else(|_| {
                tracing::debug!(?bound, "a leader-record call outlived its bound");
                false
            })
    }

    /// Gives the lease up (on shutdown), so another replica need not wait it out.
    pub async fn release(&mut self) {
        if let Some(revision) = self.held {
            let txn = Txn {
                compares: vec![Compare::ModRevision(self.key.clone(), revision)],
                ops: vec![
                    Op::Delete(self.key.clone()),
                    Op::Delete(self.term_key.clone()),
                ],
            };
            let bound = self.config.renew_deadline;
            let _ = tokio::time::timeout(bound, self.storage.txn(txn)).await;
        }
        self.step_down();
    }

    /// Waits until this replica leads, then runs `lead` with the term's [`Fence`], whose
    /// token is cancelled the moment the term ends: the lease is lost (not renewed within the
    /// renew deadline, or taken over), a fenced write is refused, or `shutdown` fires. Loops
    /// to campaign again after a loss.
    pub async fn run<F, Fut>(mut self, shutdown: CancellationToken, mut lead: F)
    where
        F: FnMut(Fence) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        loop {
            let Some(renewed) = self.campaign(&shutdown).await else {
                return;
            };
            let leading = shutdown.child_token();
            let Some(fence) = self.fence(leading.clone()) else {
                continue;
            };
            let work = tokio::spawn(lead(fence));
            if self.lead(&shutdown, &leading, work, renewed).await {
                tracing::warn!(identity = %self.config.identity, "lost the leader lease; controllers stopped");
                self.step_down();
                continue;
            }
            self.release().await;
            return;
        }
    }

    /// Tries to take the lease every retry period until it holds it (when the winning
    /// attempt began: a lease is counted from then, its write may have waited in the store);
    /// `None` once `shutdown` fires.
    async fn campaign(&mut self, shutdown: &CancellationToken) -> Option<Instant> {
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            let started = Instant::now();
            if self.attempt_within(self.config.renew_deadline).await {
                return Some(started);
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                _ = shutdown.cancelled() => return None,
            }
        }
    }

    /// Renews while `work` runs; stops it at once when renewal fails past the deadline, the
    /// term is taken over, or a fenced write found it over. True when the lease was lost,
    /// false on `shutdown`.
    async fn lead(
        &mut self,
        shutdown: &CancellationToken,
        leading: &CancellationToken,
        mut work: tokio::task::JoinHandle<()>,
        mut renewed: Instant,
    ) -> bool {
        let (retry, deadline, term) = (
            self.config.retry_period,
            self.config.renew_deadline,
            self.term,
        );
        // Whether `work` has already been awaited to completion: a JoinHandle must not be
        // polled again after it finished (shutdown also cancels the work, so both branches
        // below can be ready at once).
        let mut work_done = false;
        let lost = loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break false,
                // A fenced write found the term over.
                _ = leading.cancelled() => break true,
                _ = &mut work => {
                    work_done = true;
                    // Ended by itself (only a bug does), or stopped by a refused write.
                    break leading.is_cancelled();
                }
                _ = tokio::time::sleep(retry) => {}
            }
            let started = Instant::now();
            let left = deadline.saturating_sub(renewed.elapsed());
            if self.attempt_within(left).await && self.term == term {
                renewed = started;
            } else if self.term != term || renewed.elapsed() >= deadline {
                break true;
            }
        };
        leading.cancel();
        if !work_done {
            let _ = work.await;
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use svm_storage::embedded::EmbeddedStorage;

    fn fast(identity: &str) -> ElectionConfig {
        ElectionConfig {
            identity: identity.into(),
            lease_duration: Duration::from_millis(600),
            renew_deadline: Duration::from_millis(400),
            retry_period: Duration::from_millis(50),
        }
    }

    // The election's timings are measured on tokio's clock; the tests pause it, so durations
    // are exact and the outcome does not depend on how loaded the machine is.
    #[tokio::test(start_paused = true)]
    async fn one_of_two_candidates_leads_and_the_other_waits_for_the_lease_to_lapse() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let mut a = LeaderElector::new(storage.clone(), "/p", fast("a"));
        let mut b = LeaderElector::new(storage.clone(), "/p", fast("b"));
        assert!(a.try_acquire_or_renew().await);
        assert!(!b.try_acquire_or_renew().await);
        // a keeps renewing: b never gets it.
        for _ in 0..15 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(a.try_acquire_or_renew().await);
            assert!(!b.try_acquire_or_renew().await);
        }
        // a stops renewing (crashed): b takes over once the record sat still for a lease.
        let started = Instant::now();
        let mut taken = false;
        while started.elapsed() < Duration::from_secs(3) {
            if b.try_acquire_or_renew().await {
                taken = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(taken, "b never took over");
        assert!(started.elapsed() >= Duration::from_millis(600));
        // And a, coming back, sees it has lost the lease.
        assert!(!a.try_acquire_or_renew().await);
        let record: LeaderRecord =
            serde_json::from_slice(&storage.get("/p/leader").await.unwrap().unwrap().value)
                .unwrap();
        assert_eq!(record.holder_identity, "b");
        assert_eq!(record.leader_transitions, 1);
        let term: TermRecord =
            serde_json::from_slice(&storage.get("/p/leader-term").await.unwrap().unwrap().value)
                .unwrap();
        assert_eq!(term.holder_identity, "b");
    }

    #[tokio::test(start_paused = true)]
    async fn a_terms_fence_holds_across_renewals_and_fails_once_another_takes_over() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let mut a = LeaderElector::new(storage.clone(), "/p", fast("a"));
        let mut b = LeaderElector::new(storage.clone(), "/p", fast("b"));
        assert!(a.try_acquire_or_renew().await);
        let token = CancellationToken::new();
        let fence = a.fence(token.clone()).expect("a term");
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(a.try_acquire_or_renew().await);
            fence.check().await.expect("renewals keep the term");
        }
        // a is paused (stops renewing); b takes over after a lease.
        assert!(!b.try_acquire_or_renew().await);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(b.try_acquire_or_renew().await);
        assert!(matches!(
            fence.check().await,
            Err(svm_registry::ApiError::Fenced(_))
        ));
        assert!(token.is_cancelled(), "the refusal stops a's controllers");
        // a, resumed, renews nothing: the record is b's.
        assert!(!a.try_acquire_or_renew().await);
        assert!(a.fence(CancellationToken::new()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_write_ends_the_term_at_once_and_the_replica_campaigns_again() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let elector = LeaderElector::new(storage.clone(), "/p", fast("a"));
        let fences: Arc<std::sync::Mutex<Vec<Fence>>> = Arc::default();
        let seen = fences.clone();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(elector.run(shutdown.clone(), move |fence: Fence| {
            seen.lock().unwrap().push(fence.clone());
            async move { fence.token().cancelled().await }
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let first = fences.lock().unwrap()[0].clone();
        first.check().await.expect("the first term holds");
        // The term record changes under it (as a takeover writes it): the next write is
        // refused, which ends the term at once.
        storage
            .txn(Txn {
                compares: vec![],
                ops: vec![Op::Put("/p/leader-term".into(), b"{}".to_vec())],
            })
            .await
            .unwrap();
        assert!(first.put_records(vec![]).await.is_err());
        assert!(first.is_over());
        // Still a candidate: once the record has sat a lease unrenewed, it leads again, in a
        // new term with a fence of its own.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let fences_now = fences.lock().unwrap().clone();
        assert_eq!(fences_now.len(), 2, "{fences_now:?}");
        fences_now[1].check().await.expect("the new term holds");
        shutdown.cancel();
        task.await.unwrap();
    }

    /// A store whose calls hang while `hang` is set (a partitioned or stalled etcd).
    struct Stalling {
        inner: EmbeddedStorage,
        hang: std::sync::atomic::AtomicBool,
    }

    impl Stalling {
        async fn gate(&self) {
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }
    }

    #[async_trait::async_trait]
    impl Storage for Stalling {
        async fn current_revision(&self) -> svm_storage::Result<Revision> {
            self.gate().await;
            self.inner.current_revision().await
        }
        async fn get(&self, key: &str) -> svm_storage::Result<Option<svm_storage::KeyValue>> {
            self.gate().await;
            self.inner.get(key).await
        }
        async fn list(
            &self,
            prefix: &str,
            opts: svm_storage::ListOptions,
        ) -> svm_storage::Result<svm_storage::ListResult> {
            self.gate().await;
            self.inner.list(prefix, opts).await
        }
        async fn txn(&self, txn: Txn) -> svm_storage::Result<TxnOutcome> {
            self.gate().await;
            self.inner.txn(txn).await
        }
        async fn watch(
            &self,
            prefix: &str,
            after: Revision,
        ) -> svm_storage::Result<svm_storage::WatchStream> {
            self.inner.watch(prefix, after).await
        }
        async fn compact(&self, revision: Revision) -> svm_storage::Result<()> {
            self.inner.compact(revision).await
        }
        async fn health(&self) -> svm_storage::Result<()> {
            self.inner.health().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_hangs_during_renewal_ends_the_term_by_the_renew_deadline() {
        let stalling = Arc::new(Stalling {
            inner: EmbeddedStorage::in_memory(),
            hang: false.into(),
        });
        let storage: Arc<dyn Storage> = stalling.clone();
        let elector = LeaderElector::new(storage, "/p", fast("a"));
        let shutdown = CancellationToken::new();
        let stopped_at = Arc::new(std::sync::Mutex::new(None));
        let record = stopped_at.clone();
        let task = tokio::spawn(elector.run(shutdown.clone(), move |fence: Fence| {
            let record = record.clone();
            async move {
                fence.token().cancelled().await;
                *record.lock().unwrap() = Some(Instant::now());
            }
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let hung_at = Instant::now();
        stalling.hang.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let stopped = stopped_at.lock().unwrap().expect("the work was stopped");
        // The last renewal began at most a retry period before the hang; the term ends by the
        // renew deadline after it, well before another replica could take over (the lease).
        let after = stopped.duration_since(hung_at);
        assert!(
            after <= Duration::from_millis(400),
            "stopped {after:?} after the hang"
        );
        shutdown.cancel();
        stalling.hang.store(false, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run returns")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_shuts_down_hands_over_at_once_and_work_runs_only_while_leading() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let spawn = |name: &'static str, shutdown: CancellationToken| {
            let elector = LeaderElector::new(storage.clone(), "/p", fast(name));
            let (running, peak) = (running.clone(), peak.clone());
            tokio::spawn(elector.run(shutdown, move |fence: Fence| {
                let (running, peak) = (running.clone(), peak.clone());
                let leading = fence.token().clone();
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    leading.cancelled().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                }
            }))
        };
        let stop_a = CancellationToken::new();
        let stop_b = CancellationToken::new();
        let a = spawn("a", stop_a.clone());
        tokio::time::sleep(Duration::from_millis(200)).await;
        let b = spawn("b", stop_b.clone());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(running.load(Ordering::SeqCst), 1);
        stop_a.cancel();
        a.await.unwrap();
        // b takes over well before a lease duration would have lapsed (the record is gone).
        let handed = Instant::now();
        while running.load(Ordering::SeqCst) == 0 && handed.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(running.load(Ordering::SeqCst), 1, "b leads");
        assert!(handed.elapsed() < Duration::from_millis(600));
        assert_eq!(peak.load(Ordering::SeqCst), 1, "never two leaders at once");
        stop_b.cancel();
        b.await.unwrap();
        assert_eq!(running.load(Ordering::SeqCst), 0);
        assert!(storage.get("/p/leader").await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_ends_by_itself_ends_the_term_and_releases_the_lease() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let elector = LeaderElector::new(storage.clone(), "/p", fast("a"));
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        // Before the fix the finished JoinHandle was awaited a second time and panicked.
        let task = tokio::spawn(elector.run(CancellationToken::new(), move |_leading| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }));
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run returns once the work is done")
            .expect("run does not panic");
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(storage.get("/p/leader").await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_stops_the_work() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let stopped = CancellationToken::new();
        let elector = LeaderElector::new(storage.clone(), "/p", fast("a"));
        let shutdown = CancellationToken::new();
        let flag = stopped.clone();
        let task = tokio::spawn(elector.run(shutdown.clone(), move |fence: Fence| {
            let flag = flag.clone();
            async move {
                fence.token().cancelled().await;
                flag.cancel();
            }
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Someone else overwrites the record (as a replica that judged us dead would).
        let kv = storage.get("/p/leader").await.unwrap().unwrap();
        let other = serde_json::to_vec(&LeaderRecord {
            holder_identity: "b".into(),
            lease_duration_seconds: 1,
            acquire_time: svm_registry::now_text(),
            renew_time: svm_registry::now_text(),
            leader_transitions: 1,
        })
        .unwrap();
        storage
            .update("/p/leader", other, kv.mod_revision)
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(2), stopped.cancelled())
            .await
            .expect("the work was stopped when the lease was lost");
        shutdown.cancel();
        task.await.unwrap();
    }
}

//! Fencing: the controllers' writes commit only while their replica's leadership term lasts.
//!
//! Leader election (`svm_controllers`' `leader` module, a layer above) keeps two records next to each other:
//!
//! - `<prefix>/leader`, the lease, renewed every retry period (its mod revision changes every
//!   couple of seconds, so it cannot serve as a fence: every write racing a renewal would fail);
//! - `<prefix>/leader-term` ([`term_key`]), written in the same transaction as every change of
//!   holder and never on renewal: its mod revision names the term.
//!
//! A [`Fence`] is one term: every controller write ([`Guarded`](super::Guarded) objects, the
//! trigger's history and observer record) carries the compare "`leader-term` is still at the
//! term's revision" in its own storage transaction, and a stamp: `<prefix>/leader-writes`
//! ([`writes_key`]) is set to the writer's identity and term, so the key's history (`etcdctl
//! watch --rev`) attributes every controller write to a holder. A write whose fence fails
//! writes nothing, answers [`ApiError::Fenced`], and cancels the term's token: the controllers
//! stop at once. A replica paused past its lease (a GC pause, SIGSTOP, a partition) thus
//! cannot write once another has taken over, whatever it was in the middle of.
//!
//! Writes to the target cluster cannot carry our compare; those that decide safety (a CRD's
//! `status.storedVersions`) call [`Fence::check`] right before, with the object's own
//! resourceVersion as the precondition.
//!
//! This module is the one door through which controllers write records that are not objects
//! ([`Fence::put_records`]); objects go through [`Guarded`](super::Guarded).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::error::{ApiError, ApiResult};
use svm_storage::{Compare, Op, Revision, Storage, StorageError, Txn, TxnOutcome};

/// The key whose mod revision names the current leadership term.
pub fn term_key(prefix: &str) -> String {
    format!("{}/leader-term", prefix.trim_end_matches('/'))
}

/// The key every fenced write sets to its writer (`{"holder":…,"term":…}`).
pub fn writes_key(prefix: &str) -> String {
    format!("{}/leader-writes", prefix.trim_end_matches('/'))
}

/// A record written in the same transaction as an object (the trigger's hash history): a
/// registry-level write, so storage types stay inside the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The storage key.
    pub key: String,
    /// The bytes to put there.
    pub value: Vec<u8>,
}

/// What the stamp says.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq, Clone)]
pub struct Stamp {
    /// The identity of the replica that wrote (its leader-election identity).
    pub holder: String,
    /// The term's revision (the mod revision of `leader-term` when the term began).
    pub term: Revision,
}

/// One leadership term, or none (controllers without leader election write unfenced).
#[derive(Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

struct Inner {
    storage: Arc<dyn Storage>,
    /// `None`: unfenced (leader election off).
    term: Option<Term>,
    /// Cancelled when the term ends (a fenced write was refused, the lease was lost, or the
    /// server shuts down): the controllers stop on it.
    token: CancellationToken,
}

struct Term {
    key: String,
    revision: Revision,
    holder: String,
    writes_key: String,
    stamp: Vec<u8>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner.term {
            Some(term) => f
                .debug_struct("Fence")
                .field("holder", &term.holder)
                .field("term", &term.revision)
                .finish(),
            None => f.write_str("Fence(unfenced)"),
        }
    }
}

impl Fence {
    /// The term of `holder` that began at `revision` (the mod revision of [`term_key`]); it
    /// ends when `token` is cancelled or a fenced write finds the term over.
    pub fn for_term(
        storage: Arc<dyn Storage>,
        prefix: &str,
        holder: &str,
        revision: Revision,
        token: CancellationToken,
    ) -> Self {
        let stamp = serde_json::to_vec(&Stamp {
            holder: holder.to_string(),
            term: revision,
        })
        .unwrap_or_default();
        Self {
            inner: Arc::new(Inner {
                storage,
                term: Some(Term {
                    key: term_key(prefix),
                    revision,
                    holder: holder.to_string(),
                    writes_key: writes_key(prefix),
                    stamp,
                }),
                token,
            }),
        }
    }

    /// No fence: writes are not conditioned (one replica, `--leader-elect=false`).
    pub fn unfenced(storage: Arc<dyn Storage>, token: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                storage,
                term: None,
                token,
            }),
        }
    }

    /// Cancelled when the term ends; the controllers run until then.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Whether the term is known to be over (no store read).
    pub fn is_over(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// The holder's identity, when fenced.
    pub fn holder(&self) -> Option<&str> {
        self.inner.term.as_ref().map(|t| t.holder.as_str())
    }

    /// The compare a fenced write carries.
    fn compare(&self) -> Option<Compare> {
        self.inner
            .term
            .as_ref()
            .map(|t| Compare::ModRevision(t.key.clone(), t.revision))
    }

    /// The stamp a fenced write carries.
    fn stamp(&self) -> Option<Op> {
        self.inner
            .term
            .as_ref()
            .map(|t| Op::Put(t.writes_key.clone(), t.stamp.clone()))
    }

    /// A fenced write found the term over: stop the controllers, and say so.
    pub(crate) fn refused(&self, what: &str) -> ApiError {
        self.inner.token.cancel();
        let holder = self.holder().unwrap_or_default();
        tracing::warn!(%holder, what, "a write was refused: this replica's leadership term is over; controllers stop");
        ApiError::Fenced(format!(
            "{what}: the leadership term of {holder} is over (another replica leads)"
        ))
    }

    /// Reads the term record: Ok while the term lasts. Called right before a write to the
    /// target cluster that decides safety; a term found over stops the controllers.
    pub async fn check(&self) -> ApiResult<()> {
        if self.is_over() {
            return Err(self.refused("checking leadership"));
        }
        let Some(term) = &self.inner.term else {
            return Ok(());
        };
        let current = self
            .inner
            .storage
            .get(&term.key)
            .await
            .map_err(|e| ApiError::from_storage(e, "", "leader-term", ""))?;
        match current {
            Some(kv) if kv.mod_revision == term.revision => Ok(()),
            _ => Err(self.refused("checking leadership")),
        }
    }

    /// Writes `records` (records that are not objects, such as the trigger's observer record)
    /// under the fence, in one transaction.
    pub async fn put_records(&self, records: Vec<Record>) -> ApiResult<()> {
        let txn = Txn {
            compares: vec![],
            ops: records
                .into_iter()
                .map(|r| Op::Put(r.key, r.value))
                .collect(),
        };
        let storage = self.inner.storage.clone();
        match self.send(storage, txn, "writing records".into()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(refused)) => Err(refused),
            Err(err) => Err(ApiError::from_storage(err, "", "records", "")),
        }
    }

    /// Sends `txn` fenced (`what` names it) and sees it to its answer even when the caller
    /// stops waiting — its controllers stopped as the lease ran out while it was in flight.
    /// Such a write still reaches etcd and is refused there; seen to its answer, the replica
    /// learns and says so. `Ok(Err(refused))` when the fence failed; a failed compare of the
    /// caller's is `Failed` with its index in `txn.compares`.
    ///
    /// The fence's compare goes first: the store names the first compare that failed, and
    /// when the next leader has already rewritten the same object both fail — the term being
    /// over is what the writer must learn (a conflict would only send it round its retry
    /// loop, or, its caller gone, say nothing).
    pub(crate) async fn send(
        &self,
        storage: Arc<dyn Storage>,
        mut txn: Txn,
        what: String,
    ) -> Result<Result<TxnOutcome, ApiError>, StorageError> {
        let fence_compares = self.compare().into_iter().collect::<Vec<_>>();
        let fenced = fence_compares.len();
        txn.compares.splice(0..0, fence_compares);
        txn.ops.extend(self.stamp());
        let fence = self.clone();
        let answered = tokio::spawn(async move {
            match storage.txn(txn).await {
                Ok(TxnOutcome::Failed { index, .. }) if index < fenced => {
                    Ok(Err(fence.refused(&what)))
                }
                Ok(TxnOutcome::Failed { index, current }) => Ok(Ok(TxnOutcome::Failed {
                    index: index - fenced,
                    current,
                })),
                other => other.map(Ok),
            }
        });
        match answered.await {
            Ok(answer) => answer,
            Err(ended) => Ok(Err(ApiError::Internal(format!(
                "a fenced write's task ended without an answer: {ended}"
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svm_storage::embedded::EmbeddedStorage;

    async fn term(storage: &Arc<dyn Storage>, holder: &str) -> Revision {
        crate::testing::take_term(storage, "/p", holder).await
    }

    #[tokio::test]
    async fn records_land_while_the_term_lasts_and_stop_the_controllers_after() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let revision = term(&storage, "a").await;
        let token = CancellationToken::new();
        let fence = Fence::for_term(storage.clone(), "/p", "a", revision, token.clone());
        let record = |v: &str| Record {
            key: "/p/trigger/observer".into(),
            value: v.as_bytes().to_vec(),
        };
        fence.put_records(vec![record("one")]).await.unwrap();
        fence.check().await.unwrap();
        let stamp: Stamp =
            serde_json::from_slice(&storage.get(&writes_key("/p")).await.unwrap().unwrap().value)
                .unwrap();
        assert_eq!(
            stamp,
            Stamp {
                holder: "a".into(),
                term: revision
            }
        );
        // Another replica takes over.
        term(&storage, "b").await;
        assert!(matches!(
            fence.put_records(vec![record("two")]).await,
            Err(ApiError::Fenced(_))
        ));
        assert!(
            token.is_cancelled(),
            "a refused write stops the controllers"
        );
        let kept = storage.get("/p/trigger/observer").await.unwrap().unwrap();
        assert_eq!(kept.value, b"one");
        assert!(matches!(fence.check().await, Err(ApiError::Fenced(_))));
    }

    /// The paused leader's write of an object the next leader has rewritten since: both its
    /// compares fail, and it is the term's end that it is told (not a conflict to retry).
    #[tokio::test]
    async fn a_write_whose_object_and_term_both_moved_on_is_refused_not_a_conflict() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let revision = term(&storage, "a").await;
        let token = CancellationToken::new();
        let fence = Fence::for_term(storage.clone(), "/p", "a", revision, token.clone());
        let write = |expected: Revision| Txn {
            compares: vec![Compare::ModRevision("/p/object".into(), expected)],
            ops: vec![Op::Put("/p/object".into(), b"mine".to_vec())],
        };
        // While the term lasts, the object's own compare is the caller's, at its own index.
        let answer = fence
            .send(storage.clone(), write(99), "writing object".into())
            .await
            .expect("answered");
        assert!(
            matches!(
                answer,
                Ok(TxnOutcome::Failed {
                    index: 0,
                    current: None
                })
            ),
            "{answer:?}"
        );
        assert!(!token.is_cancelled());
        term(&storage, "b").await;
        let answer = fence
            .send(storage.clone(), write(99), "writing object".into())
            .await
            .expect("answered");
        assert!(matches!(answer, Err(ApiError::Fenced(_))), "{answer:?}");
        assert!(token.is_cancelled(), "the refusal stops the controllers");
        assert!(storage.get("/p/object").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_check_finds_a_term_taken_over() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let revision = term(&storage, "a").await;
        let token = CancellationToken::new();
        let fence = Fence::for_term(storage.clone(), "/p", "a", revision, token.clone());
        term(&storage, "b").await;
        assert!(matches!(fence.check().await, Err(ApiError::Fenced(_))));
        assert!(token.is_cancelled());
        // Unfenced: nothing to compare.
        let open = Fence::unfenced(storage, CancellationToken::new());
        open.check().await.unwrap();
        open.put_records(vec![]).await.unwrap();
    }
}

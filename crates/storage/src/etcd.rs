//! The etcd backend, over `etcd-client`: every `Storage` operation is one etcd request, so
//! revisions, history, compaction and watch semantics are etcd's own.
//!
//! - list: a range read of `[max(start, prefix), prefix_end)` at the requested revision with the
//!   limit; etcd's `count` covers the whole range, so `remaining = count - returned`;
//! - txn: etcd compares (`mod_revision == r`, or `create_revision == 0` for absence); the else
//!   branch reads every compared key, so a failure names the first compare that does not hold
//!   and that key's mod revision, as seen atomically with the failure;
//! - watch: see the `watch` module;
//! - errors: etcd's compaction / future-revision errors become `Compacted` / `FutureRevision`,
//!   invalid requests an `InvalidInput` I/O error, everything else (connection refused, no
//!   leader, timeouts) `Unavailable`;
//! - several endpoints (`--etcd-servers=<a>,<b>,<c>`): the client balances requests over
//!   every member and keeps sending some to a member that is down, each failing at once with
//!   "connection refused" (etcdv3/etcd-client#39). As etcd's own Go client does, a request that
//!   never reached a member is sent again (to whichever the balancer picks), and so is a read
//!   whose connection broke, reads being safe to repeat; while the members elect a leader
//!   (etcd answers "no leader", "leader changed"), reads — and writes refused for want of a
//!   leader — are tried again for up to 5 s (`ELECTION_GRACE`). A write whose connection broke, or
//!   that timed out, may have been applied: that stays `Unavailable`, for the caller's
//!   compare-and-swap to sort out.

mod kv;
pub mod tls;
mod watch;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, CompareOp, ConnectOptions, GetOptions, GetResponse, TxnOp, TxnOpResponse, WatchOptions,
};

use super::{
    Compare, KeyValue, ListOptions, ListResult, Op, Result, Revision, Storage, StorageError, Txn,
    TxnOutcome, WatchStream,
};
use kv::key_value;

/// Tuning of the etcd connection.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// How often an otherwise idle watch asks etcd for a progress notification, which it
    /// passes on as `WatchItem::Progress` (drives watch bookmarks). Zero disables them.
    pub progress_interval: Duration,
    /// Time allowed to establish a connection to an endpoint.
    pub dial_timeout: Duration,
    /// Time allowed for one request (not for a watch, which lives as long as its stream).
    pub request_timeout: Duration,
    /// HTTP/2 keep-alive ping interval and timeout: finds dead connections under idle watches.
    pub keep_alive: (Duration, Duration),
    /// TLS to etcd (`https://` endpoints); `None` for plain `http://`.
    pub tls: Option<std::sync::Arc<tls::EtcdTls>>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            progress_interval: Duration::from_secs(1),
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            keep_alive: (Duration::from_secs(30), Duration::from_secs(10)),
            tls: None,
        }
    }
}

/// A `Storage` on an etcd cluster. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct EtcdStorage {
    client: Client,
    options: EtcdOptions,
    /// How many times a request is sent at most when it cannot reach a member (see the
    /// module docs): a few tries per endpoint, so a member that is down costs no failure.
    attempts: usize,
}

/// Sends per endpoint a request may take before its failure to reach etcd is the answer.
const ATTEMPTS_PER_ENDPOINT: usize = 4;

/// How long a request refused for want of a leader is tried again: etcd elects one within a
/// couple of election timeouts (1 s by default) of losing it.
const ELECTION_GRACE: Duration = Duration::from_secs(5);

/// Largest response accepted from etcd. tonic's default (4 MiB) would fail a list of a few
/// thousand objects; etcd itself sends up to 2 GiB, as kube-apiserver's client accepts.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// The key read by `current_revision` and `health`. Any key works: only the response header's
/// revision matters, and count-only reads return no values.
const PROBE_KEY: &str = "\0svm-apiserver-probe";

impl EtcdStorage {
    /// Connect to `endpoints` (`http://host:port`, or `https://host:port` with TLS) and check
    /// that etcd answers; fails with `Unavailable` when it does not, saying why for TLS.
    pub async fn connect(endpoints: &[String], opts: EtcdOptions) -> Result<EtcdStorage> {
        if endpoints.is_empty() {
            return Err(StorageError::unavailable("no etcd endpoints given"));
        }
        let (interval, timeout) = opts.keep_alive;
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(opts.dial_timeout)
            .with_keep_alive(interval, timeout)
            .with_keep_alive_while_idle(true)
            // Watches on a member cut off from its cluster fail instead of going silent.
            .with_require_leader(true);
        match &opts.tls {
            Some(tls) => {
                check_tls(tls, endpoints, opts.dial_timeout).await?;
                let mut config = etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca_pem));
                if let Some((cert, key)) = &tls.identity {
                    config = config.identity(etcd_client::Identity::from_pem(cert, key));
                }
                connect = connect.with_tls(config);
            }
            None => {
                if let Some(https) = endpoints.iter().find(|e| e.starts_with("https://")) {
                    return Err(StorageError::unavailable(format!(
                        "{https} is reached over TLS: give --etcd-cafile (and --etcd-certfile,                          --etcd-keyfile for an etcd with --client-cert-auth)"
                    )));
                }
            }
        }
        let client = within(
            opts.request_timeout,
            "connecting",
            Client::connect(endpoints, Some(connect)),
        )
        .await?
        .map_err(|e| {
            StorageError::unavailable_because(format!("connecting to etcd {endpoints:?}"), e)
        })?;
        let storage = EtcdStorage {
            client,
            options: opts,
            attempts: endpoints.len().saturating_mul(ATTEMPTS_PER_ENDPOINT),
        };
        storage.health().await?;
        Ok(storage)
    }

    fn kv(&self) -> etcd_client::KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    fn watch_client(&self) -> etcd_client::WatchClient {
        self.client
            .watch_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    async fn range(
        &self,
        key: impl Into<Vec<u8>>,
        options: GetOptions,
    ) -> Result<GetResponse, Failure> {
        let key = key.into();
        let read = self.resend(Repeat::Safe, || {
            let mut kv = self.kv();
            let (key, options) = (key.clone(), options.clone());
            async move { kv.get(key, Some(options)).await }
        });
        within(self.options.request_timeout, "a read", read)
            .await?
            .map_err(Failure::from)
    }

    /// Sends the request `send` makes, again while it fails without reaching etcd (and, for
    /// a request safe to repeat, while its connection breaks), up to `self.attempts` sends;
    /// and again after a pause while etcd has no leader, for up to `ELECTION_GRACE`.
    async fn resend<T, F, Fut>(
        &self,
        repeat: Repeat,
        mut send: F,
    ) -> std::result::Result<T, etcd_client::Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let started = std::time::Instant::now();
        let mut sent = 1;
        let mut pause = Duration::from_millis(25);
        loop {
            let err = match send().await {
                Ok(answer) => return Ok(answer),
                Err(err) => err,
            };
            match again(&err, repeat) {
                Again::Now if sent < self.attempts => {
                    tracing::debug!(error = %err, sent, "an etcd request did not reach a member; sending it again");
                    sent += 1;
                }
                Again::AfterElection if started.elapsed() + pause < ELECTION_GRACE => {
                    tracing::debug!(error = %err, "etcd has no leader; the request waits for one");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                _ => return Err(err),
            }
        }
    }

    /// The compacted revision, for errors that need it and etcd does not report: a watch from
    /// `below` (known to be compacted away) is cancelled with it. Falls back to `below` if etcd
    /// does not say in time.
    async fn compacted_revision(&self, below: Revision) -> Revision {
        let probe = watch::compacted_revision(
            self.watch_client(),
            PROBE_KEY,
            below.max(1),
            // etcd tells an unsynced watcher within its sync loop (100 ms); waiting longer only
            // delays the error.
            self.options.request_timeout.min(Duration::from_secs(3)),
        );
        probe.await.unwrap_or(below)
    }

    async fn read_error(&self, failure: Failure, requested: Revision) -> StorageError {
        match failure {
            Failure::Compacted => StorageError::Compacted {
                requested,
                compacted: self.compacted_revision(requested).await,
            },
            Failure::FutureRevision => StorageError::FutureRevision {
                requested,
                current: self.current_revision().await.unwrap_or(requested - 1),
            },
            Failure::Other(error) => error,
        }
    }
}

#[async_trait]
impl Storage for EtcdStorage {
    async fn current_revision(&self) -> Result<Revision> {
        let response = self
            .range(PROBE_KEY, GetOptions::new().with_count_only())
            .await
            .map_err(Failure::into_error)?;
        header_revision(&response)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let response = self
            .range(key, GetOptions::new())
            .await
            .map_err(Failure::into_error)?;
        response.kvs().first().map(key_value).transpose()
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        let from = match &opts.start {
            Some(start) if start.as_str() > prefix => start.as_bytes().to_vec(),
            _ if prefix.is_empty() => vec![0],
            _ => prefix.as_bytes().to_vec(),
        };
        let mut get = GetOptions::new().with_range(prefix_end(prefix.as_bytes()));
        let requested = opts.revision.filter(|r| *r > 0);
        if let Some(revision) = requested {
            get = get.with_revision(revision);
        }
        match opts.limit {
            // etcd reads a limit of 0 as "no limit": ask for the count alone.
            Some(0) => get = get.with_count_only(),
            Some(limit) => get = get.with_limit(i64::try_from(limit).unwrap_or(i64::MAX)),
            None => {}
        }
        let response = match self.range(from, get).await {
            Ok(response) => response,
            Err(failure) => return Err(self.read_error(failure, requested.unwrap_or(0)).await),
        };
        let items = response
            .kvs()
            .iter()
            .map(key_value)
            .collect::<Result<Vec<_>>>()?;
        let revision = match requested {
            Some(revision) => revision,
            None => header_revision(&response)?,
        };
        let returned = i64::try_from(items.len()).unwrap_or(i64::MAX);
        Ok(ListResult {
            remaining: (response.count() - returned).max(0),
            items,
            revision,
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        txn.check()?;
        let request = etcd_txn(&txn);
        let commit = self.resend(Repeat::Unsafe, || {
            let mut kv = self.kv();
            let request = request.clone();
            async move { kv.txn(request).await }
        });
        let response = within(self.options.request_timeout, "a transaction", commit)
            .await?
            .map_err(|e| Failure::from(e).into_error())?;
        let revision = response
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| StorageError::unavailable("etcd sent no response header"))?;
        if response.succeeded() {
            return Ok(TxnOutcome::Committed { revision });
        }
        failed_compare(&txn.compares, &response.op_responses())
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let start = after.saturating_add(1).max(1);
        let options = WatchOptions::new()
            .with_range(prefix_end(prefix.as_bytes()))
            .with_start_revision(start)
            .with_prev_key();
        let key = if prefix.is_empty() {
            vec![0]
        } else {
            prefix.as_bytes().to_vec()
        };
        // Nothing is read before the stream starts: starting it again is safe.
        let start_watch = self.resend(Repeat::Safe, || {
            let mut client = self.watch_client();
            let (key, options) = (key.clone(), options.clone());
            async move { client.watch(key, Some(options)).await }
        });
        let stream = within(
            self.options.request_timeout,
            "starting a watch",
            start_watch,
        )
        .await?
        .map_err(|e| Failure::from(e).into_error())?;
        Ok(watch::stream(stream, start, self.options.progress_interval))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        // Compacting to a revision twice is compacting it once (the second is refused as
        // compacted, which is handled below).
        let compaction = self.resend(Repeat::Safe, || {
            let mut kv = self.kv();
            async move { kv.compact(revision, None).await }
        });
        let compacted = within(self.options.request_timeout, "a compaction", compaction).await?;
        match compacted.map_err(Failure::from) {
            Ok(_) => Ok(()),
            // History before `revision - 1` is certainly gone, so a probe from there learns
            // the compacted revision.
            Err(Failure::Compacted) => Err(StorageError::Compacted {
                requested: revision,
                compacted: self.compacted_revision(revision - 1).await,
            }),
            Err(failure) => Err(self.read_error(failure, revision).await),
        }
    }

    async fn health(&self) -> Result<()> {
        self.current_revision().await.map(|_| ())
    }
}

/// Whether a request may be sent again after any failure of its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repeat {
    /// A read (or a watch's start): sending it twice is reading twice.
    Safe,
    /// A write: sent again only if it certainly never reached etcd.
    Unsafe,
}

/// Whether a failed request is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Again {
    /// It did not reach etcd: at once, to whichever member the balancer picks.
    Now,
    /// etcd had no leader: after a pause, while an election may be running.
    AfterElection,
    /// No: its failure is the answer.
    No,
}

/// What to do about a request that failed with `err`: send it again at once when it never
/// reached etcd (no connection could be made: a member down) or, for a request safe to
/// repeat, when the connection it went out on broke; after a pause when etcd refused it for
/// want of a leader ("no leader": never proposed) or, for a read, lost its leader meanwhile
/// ("leader changed"); otherwise not.
fn again(err: &etcd_client::Error, repeat: Repeat) -> Again {
    if let etcd_client::Error::GRpcStatus(status) = err
        && status.code() == tonic::Code::Unavailable
    {
        // etcd's own answers (rpctypes), as opposed to the transport's.
        match status.message() {
            "etcdserver: no leader" => return Again::AfterElection,
            "etcdserver: leader changed" if repeat == Repeat::Safe => {
                return Again::AfterElection;
            }
            _ => {}
        }
    }
    if unsent(err, repeat) {
        Again::Now
    } else {
        Again::No
    }
}

/// Whether `err` says the request did not reach etcd: no connection could be made (a member
/// down, refusing connections) — or, for a request safe to repeat, the connection it went out
/// on broke.
fn unsent(err: &etcd_client::Error, repeat: Repeat) -> bool {
    let io_kind = |source: Option<&(dyn std::error::Error + 'static)>| {
        let mut next = source;
        while let Some(error) = next {
            if let Some(io) = error.downcast_ref::<std::io::Error>() {
                return Some(io.kind());
            }
            next = error.source();
        }
        None
    };
    let kind = match err {
        etcd_client::Error::GRpcStatus(status) => io_kind(Some(status)),
        etcd_client::Error::TransportError(error) => io_kind(Some(error)),
        etcd_client::Error::IoError(error) => Some(error.kind()),
        _ => None,
    };
    use std::io::ErrorKind::*;
    match kind {
        Some(ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable) => true,
        Some(BrokenPipe | ConnectionReset | ConnectionAborted | NotConnected | UnexpectedEof) => {
            repeat == Repeat::Safe
        }
        _ => false,
    }
}

/// How an etcd request failed, before the context needed for some errors is added.
#[derive(Debug)]
enum Failure {
    Compacted,
    FutureRevision,
    Other(StorageError),
}

impl Failure {
    fn into_error(self) -> StorageError {
        match self {
            Failure::Compacted => {
                StorageError::unavailable("etcd: required revision has been compacted")
            }
            Failure::FutureRevision => {
                StorageError::unavailable("etcd: required revision is a future revision")
            }
            Failure::Other(error) => error,
        }
    }
}

impl From<StorageError> for Failure {
    fn from(error: StorageError) -> Self {
        Failure::Other(error)
    }
}

impl From<etcd_client::Error> for Failure {
    fn from(error: etcd_client::Error) -> Self {
        match &error {
            etcd_client::Error::GRpcStatus(status) => {
                let message = status.message();
                if message.contains("required revision has been compacted") {
                    Failure::Compacted
                } else if message.contains("required revision is a future revision") {
                    Failure::FutureRevision
                } else if status.code() == tonic::Code::InvalidArgument
                    // A request over the gRPC size limit (etcd's own limit answers
                    // InvalidArgument "request is too large").
                    || (status.code() == tonic::Code::ResourceExhausted
                        && message.contains("larger than max"))
                {
                    Failure::Other(StorageError::Io(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("etcd rejected the request: {message}"),
                    )))
                } else {
                    Failure::Other(StorageError::unavailable_because("etcd", error))
                }
            }
            _ => Failure::Other(StorageError::unavailable_because("etcd", error)),
        }
    }
}

/// Every endpoint must be `https://`, and at least one must complete a TLS handshake with our
/// certificates; otherwise the error says what each one answered.
async fn check_tls(tls: &tls::EtcdTls, endpoints: &[String], timeout: Duration) -> Result<()> {
    let mut failures = Vec::new();
    for endpoint in endpoints {
        match tls.probe(endpoint, timeout).await {
            Ok(()) => {}
            Err(failure) => failures.push(failure),
        }
    }
    let plain = endpoints.iter().any(|e| !e.starts_with("https://"));
    if plain || failures.len() == endpoints.len() {
        return Err(StorageError::unavailable(format!(
            "etcd over TLS: {}",
            failures.join("; ")
        )));
    }
    for failure in failures {
        tracing::warn!(%failure, "an etcd endpoint failed its TLS check");
    }
    Ok(())
}

/// Bound a request's time; a request that runs out is `Unavailable`.
async fn within<T>(
    limit: Duration,
    what: &str,
    request: impl std::future::Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout(limit, request)
        .await
        .map_err(|_| StorageError::unavailable(format!("etcd did not answer {what} in {limit:?}")))
}

fn compare_key(compare: &Compare) -> &str {
    match compare {
        Compare::Absent(key) | Compare::ModRevision(key, _) => key,
    }
}

/// Our transaction as etcd's: its compares, its ops when they all hold, and otherwise a read
/// of every compared key, so that a failure names the compare that did not hold.
fn etcd_txn(txn: &Txn) -> etcd_client::Txn {
    let compares: Vec<etcd_client::Compare> = txn.compares.iter().map(etcd_compare).collect();
    let ops: Vec<TxnOp> = txn
        .ops
        .iter()
        .map(|op| match op {
            Op::Put(key, value) => TxnOp::put(key.as_str(), value.clone(), None),
            Op::Delete(key) => TxnOp::delete(key.as_str(), None),
        })
        .collect();
    let reads: Vec<TxnOp> = txn
        .compares
        .iter()
        .map(|compare| TxnOp::get(compare_key(compare), None))
        .collect();
    etcd_client::Txn::new()
        .when(compares)
        .and_then(ops)
        .or_else(reads)
}

/// One compare as etcd's: absence is a create revision of 0.
fn etcd_compare(compare: &Compare) -> etcd_client::Compare {
    match compare {
        Compare::Absent(key) => {
            etcd_client::Compare::create_revision(key.as_str(), CompareOp::Equal, 0)
        }
        Compare::ModRevision(key, revision) if *revision > 0 => {
            etcd_client::Compare::mod_revision(key.as_str(), CompareOp::Equal, *revision)
        }
        // etcd reads a missing key's mod revision as 0; ours never holds for one, so a
        // non-positive expectation is a compare that cannot hold.
        Compare::ModRevision(key, _) => {
            etcd_client::Compare::mod_revision(key.as_str(), CompareOp::Less, 0)
        }
    }
}

/// The first compare of a failed transaction that does not hold, and its key's mod revision,
/// from the reads of the else branch (`responses`, one per compare, seen atomically with the
/// failure).
fn failed_compare(compares: &[Compare], responses: &[TxnOpResponse]) -> Result<TxnOutcome> {
    for (index, compare) in compares.iter().enumerate() {
        let current = match responses.get(index) {
            Some(TxnOpResponse::Get(read)) => read.kvs().first().map(|kv| kv.mod_revision()),
            _ => {
                return Err(StorageError::unavailable(
                    "etcd answered a failed transaction without its reads",
                ));
            }
        };
        let holds = match compare {
            Compare::Absent(_) => current.is_none(),
            Compare::ModRevision(_, expected) => current == Some(*expected),
        };
        if !holds {
            return Ok(TxnOutcome::Failed { index, current });
        }
    }
    Err(StorageError::unavailable(
        "etcd reported a failed compare, but every compare holds",
    ))
}

fn header_revision(response: &GetResponse) -> Result<Revision> {
    response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| StorageError::unavailable("etcd sent no response header"))
}

/// The end of the key range `prefix` starts (etcd's `GetPrefixRangeEnd`): the prefix with its
/// last byte below 0xff incremented and what follows dropped; `\0` (to the end of the keyspace)
/// when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::{Again, Repeat, again, prefix_end, unsent};
    use std::io::{Error, ErrorKind};

    #[test]
    fn only_requests_that_never_reached_etcd_are_sent_again_unless_safe_to_repeat() {
        let io = |kind: ErrorKind| etcd_client::Error::IoError(Error::from(kind));
        for kind in [ErrorKind::ConnectionRefused, ErrorKind::HostUnreachable] {
            assert!(unsent(&io(kind), Repeat::Unsafe), "{kind:?}");
            assert!(unsent(&io(kind), Repeat::Safe), "{kind:?}");
        }
        // The connection broke: a write may have been applied; a read is read again.
        for kind in [ErrorKind::BrokenPipe, ErrorKind::ConnectionReset] {
            assert!(!unsent(&io(kind), Repeat::Unsafe), "{kind:?}");
            assert!(unsent(&io(kind), Repeat::Safe), "{kind:?}");
        }
        assert!(!unsent(&io(ErrorKind::TimedOut), Repeat::Safe));
    }

    #[test]
    fn requests_refused_for_want_of_a_leader_wait_for_one() {
        let etcd = |message: &str| {
            etcd_client::Error::GRpcStatus(tonic::Status::unavailable(message.to_string()))
        };
        // Refused before it was proposed: safe for a write too.
        let no_leader = etcd("etcdserver: no leader");
        assert_eq!(again(&no_leader, Repeat::Unsafe), Again::AfterElection);
        assert_eq!(again(&no_leader, Repeat::Safe), Again::AfterElection);
        // A read that lost its leader is read again; a write may have been applied.
        let changed = etcd("etcdserver: leader changed");
        assert_eq!(again(&changed, Repeat::Safe), Again::AfterElection);
        assert_eq!(again(&changed, Repeat::Unsafe), Again::No);
        let timed_out = etcd("etcdserver: request timed out");
        assert_eq!(again(&timed_out, Repeat::Safe), Again::No);
        assert_eq!(again(&timed_out, Repeat::Unsafe), Again::No);
        let refused = etcd_client::Error::IoError(Error::from(ErrorKind::ConnectionRefused));
        assert_eq!(again(&refused, Repeat::Unsafe), Again::Now);
    }

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }
}

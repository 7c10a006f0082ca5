//! Reads: get with resourceVersion semantics, and consistent paged lists (k8s.io/apiserver
//! `storage/etcd3` `Get` and `GetList`): every page of a list is read at one revision, carried
//! in the continue token; filtered lists keep reading until the page is full.

use super::super::continue_token::ContinueToken;
use super::super::error::{ApiError, ApiResult};
use super::super::strategy::Strategy;
use super::selection::Selection;
use super::{ObjectRef, Store, decode_stored, parse_resource_version, too_large};
use svm_storage::{KeyValue, ListOptions, ListResult, Revision, StorageError};

/// kube-apiserver's cap on one storage read while filling a filtered page.
const MAX_PAGE_READ: usize = 10_000;

const LIST_TOO_OLD: &str = "The resourceVersion for the provided list is too old.";
const CONTINUE_TOO_OLD: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Which state a read sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAt {
    /// The current state (resourceVersion unset or "0").
    Current,
    /// Exactly this revision (resourceVersionMatch=Exact, or a legacy paged list).
    Exact(Revision),
    /// The current state, which must have reached this revision.
    NotOlderThan(Revision),
}

impl ReadAt {
    /// `resourceVersion` + `resourceVersionMatch` of a list, as upstream's storage interprets
    /// them; a legacy `resourceVersion=N` with a limit reads exactly N.
    pub(crate) fn for_list(
        resource_version: Option<&str>,
        resource_version_match: Option<&str>,
        paged: bool,
    ) -> ApiResult<Self> {
        let revision = match resource_version.filter(|rv| !rv.is_empty()) {
            None => return Ok(ReadAt::Current),
            Some(rv) => parse_resource_version(rv)?,
        };
        match resource_version_match.filter(|m| !m.is_empty()) {
            _ if revision == 0 => Ok(ReadAt::Current),
            Some("Exact") => Ok(ReadAt::Exact(revision)),
            Some("NotOlderThan") => Ok(ReadAt::NotOlderThan(revision)),
            None if paged => Ok(ReadAt::Exact(revision)),
            None => Ok(ReadAt::NotOlderThan(revision)),
            Some(other) => Err(ApiError::BadRequest(format!(
                "unknown ResourceVersionMatch value: {other}"
            ))),
        }
    }
}

/// One page of a list.
#[derive(Debug, Clone)]
pub(crate) struct ListPage<O> {
    pub items: Vec<O>,
    /// The revision the list was read at: its resourceVersion.
    pub revision: Revision,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
    /// How many items follow (only for unfiltered pages, as upstream).
    pub remaining_item_count: Option<i64>,
}

/// A list request, already parsed.
pub(crate) struct ListQuery<S: Strategy> {
    /// One namespace's objects (namespaced kinds), or every object.
    pub namespace: Option<String>,
    pub selection: Selection<S>,
    /// `None` = everything in one page.
    pub limit: Option<usize>,
    pub continue_token: Option<ContinueToken>,
    pub read_at: ReadAt,
}

/// Where the next storage read of a list starts, how many keys it asks for, and the revision
/// every read of the list is at.
struct Cursor {
    start: Option<String>,
    /// Unfiltered pages read exactly `limit` keys; filtered ones read more and more.
    size: Option<usize>,
    /// `None` until the first read: the current revision then.
    revision: Option<Revision>,
    /// The revision the current one must have reached (`NotOlderThan`).
    minimum: Option<Revision>,
}

impl Cursor {
    /// The first read of `query`: where its continue token left off, or the start of `prefix`.
    fn new<S: Strategy>(query: &ListQuery<S>, prefix: &str) -> Self {
        let (revision, minimum) = match (&query.continue_token, query.read_at) {
            (Some(token), _) => (token.revision, None),
            (None, ReadAt::Current) => (None, None),
            (None, ReadAt::Exact(rev)) => (Some(rev), None),
            (None, ReadAt::NotOlderThan(rev)) => (None, Some(rev)),
        };
        Cursor {
            start: query
                .continue_token
                .as_ref()
                .map(|t| format!("{prefix}{}", t.start)),
            size: query.limit,
            revision,
            minimum,
        }
    }

    /// The list stays at the revision its first read was served at, which must have reached
    /// the minimum.
    fn pin(&mut self, served: Revision) -> ApiResult<()> {
        if self.revision.is_none() {
            if let Some(minimum) = self.minimum.filter(|m| *m > served) {
                return Err(too_large(minimum, served));
            }
            self.revision = Some(served);
        }
        Ok(())
    }

    /// The next read starts after `last_key`, asking for twice as many keys (up to
    /// [`MAX_PAGE_READ`]).
    fn advance(&mut self, last_key: Option<&str>) {
        self.start = last_key.map(|k| format!("{k}\0"));
        self.size = self
            .size
            .map(|n| n.saturating_mul(2).clamp(1, MAX_PAGE_READ));
    }
}

/// Decode the stored objects of one read into `items`, keeping those `selection` matches,
/// until `items` holds `limit`; returns whether the limit cut the read short. `last_key` is
/// the last key taken, after which the next read (or page) starts.
fn take_matching<S: Strategy>(
    kvs: &[KeyValue],
    selection: &Selection<S>,
    limit: usize,
    items: &mut Vec<S::Object>,
    last_key: &mut Option<String>,
) -> ApiResult<bool> {
    for kv in kvs {
        if items.len() >= limit {
            return Ok(true);
        }
        *last_key = Some(kv.key.clone());
        let obj: S::Object = decode_stored(kv, kv.mod_revision)?;
        if selection.matches(&obj) {
            items.push(obj);
        }
    }
    Ok(false)
}

impl<S: Strategy> Store<S> {
    /// The object at `at` (a name, or `(namespace, name)`) at the current revision, if it
    /// exists.
    pub async fn get<'a>(&self, at: impl Into<ObjectRef<'a>>) -> ApiResult<Option<S::Object>> {
        let at = at.into();
        let name = at.name;
        let key = self.key(at)?;
        match self.storage.get(&key).await {
            Ok(Some(kv)) => decode_stored(&kv, kv.mod_revision).map(Some),
            Ok(None) => Ok(None),
            Err(err) => Err(self.storage_error(err, name)),
        }
    }

    /// A get with the `resourceVersion` parameter: "" and "0" read the current object; "N"
    /// must not be newer than the store (504 otherwise), as upstream's etcd-backed get.
    pub(crate) async fn get_with_version(
        &self,
        at: ObjectRef<'_>,
        resource_version: Option<&str>,
    ) -> ApiResult<S::Object> {
        let name = at.name;
        let minimum = match resource_version.filter(|rv| !rv.is_empty()) {
            None => 0,
            Some(rv) => parse_resource_version(rv)?,
        };
        let found = self.get(at).await?;
        if minimum > 0 {
            let current = self
                .storage
                .current_revision()
                .await
                .map_err(|e| self.storage_error(e, name))?;
            if minimum > current {
                return Err(too_large(minimum, current));
            }
        }
        found.ok_or_else(|| self.not_found(name))
    }

    /// Every object (of every namespace) at the current revision, and that revision.
    pub async fn list_all(&self) -> ApiResult<(Vec<S::Object>, Revision)> {
        let page = self
            .list_page(ListQuery {
                namespace: None,
                selection: Selection::everything(self.strategy.clone()),
                limit: None,
                continue_token: None,
                read_at: ReadAt::Current,
            })
            .await?;
        Ok((page.items, page.revision))
    }

    /// One page of a list.
    pub(crate) async fn list_page(&self, query: ListQuery<S>) -> ApiResult<ListPage<S::Object>> {
        let paging = query.limit.is_some();
        let limit = query.limit.unwrap_or(usize::MAX);
        let mut cursor = Cursor::new(&query, &self.prefix);
        let mut items = Vec::new();
        let mut last_key: Option<String> = None;
        let (has_more, remaining) = loop {
            let page = self
                .read_page(cursor.start.clone(), cursor.size, cursor.revision, &query)
                .await?;
            cursor.pin(page.revision)?;
            let limit_reached = take_matching(
                &page.items,
                &query.selection,
                limit,
                &mut items,
                &mut last_key,
            )?;
            let has_more = page.more() || limit_reached;
            if limit_reached || !page.more() || (paging && items.len() >= limit) {
                // The keys after this read: exact for unfiltered pages, which read `limit`
                // keys and are the only ones that report it.
                break (has_more, page.remaining);
            }
            cursor.advance(last_key.as_deref());
        };
        let revision = cursor.revision.unwrap_or_default();
        let continue_token = match (&last_key, has_more) {
            (Some(key), true) => {
                let suffix = key.strip_prefix(&self.prefix).unwrap_or(key);
                Some(ContinueToken::after(suffix, revision).encode())
            }
            _ => None,
        };
        let remaining_item_count =
            (continue_token.is_some() && query.selection.is_empty()).then_some(remaining);
        Ok(ListPage {
            items,
            revision,
            continue_token,
            remaining_item_count,
        })
    }

    /// One storage read, its failures mapped as upstream maps etcd's.
    async fn read_page(
        &self,
        start: Option<String>,
        limit: Option<usize>,
        revision: Option<Revision>,
        query: &ListQuery<S>,
    ) -> ApiResult<ListResult> {
        let opts = ListOptions {
            start,
            limit,
            revision,
        };
        let prefix = self.scope_prefix(query.namespace.as_deref());
        match self.storage.list(&prefix, opts).await {
            Ok(page) => Ok(page),
            Err(StorageError::Compacted { .. }) => Err(match &query.continue_token {
                Some(token) => ApiError::Expired {
                    message: CONTINUE_TOO_OLD.into(),
                    continue_token: Some(token.inconsistent().encode()),
                },
                None => ApiError::Expired {
                    message: LIST_TOO_OLD.into(),
                    continue_token: None,
                },
            }),
            Err(StorageError::FutureRevision { requested, current }) => {
                Err(too_large(requested, current))
            }
            Err(err) => Err(self.storage_error(err, "")),
        }
    }
}

//! LIST: one page at a consistent revision (recordings 04, 04b, 05).

use serde_json::Value;

use super::{Engine, parse_resource_version, too_large_resource_version};
use crate::continue_token::ContinueToken;
use crate::object;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiResult, StatusError};
use crate::store::ReadError;

/// What one LIST asks for.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<ContinueToken>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// One page of a LIST, objects in storage form with resourceVersion set.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<Value>,
    pub revision: u64,
    pub next: Option<ContinueToken>,
    pub remaining: Option<usize>,
}

impl Engine {
    /// LIST: one page at a consistent revision (recordings 04, 04b, 05).
    pub fn list(
        &self,
        def: &ResourceDef,
        prefix: &str,
        params: &ListParams,
    ) -> ApiResult<ListPage> {
        let gr = def.group_resource();
        let limit = params.limit.filter(|l| *l > 0);
        let (snapshot_rev, snapshot_live) = self.store.snapshot(&gr, prefix);
        let mut first_page_at_snapshot = false;
        let (revision, start) = match &params.continue_token {
            Some(token) => {
                let start = format!("{prefix}{}", token.start);
                match token.revision {
                    // A compacted revision is noticed by the scan below.
                    Some(rev) => (rev, Some(start)),
                    None => (snapshot_rev, Some(start)),
                }
            }
            None => {
                let rv = params.resource_version.as_deref().unwrap_or("");
                let exact = params.resource_version_match.as_deref() == Some("Exact")
                    || (params.resource_version_match.is_none()
                        && limit.is_some()
                        && !rv.is_empty()
                        && rv != "0");
                if rv.is_empty() || rv == "0" {
                    first_page_at_snapshot = true;
                    (snapshot_rev, None)
                } else {
                    let wanted = parse_resource_version(rv)?;
                    if wanted > snapshot_rev {
                        return Err(too_large_resource_version(wanted, snapshot_rev));
                    }
                    if exact {
                        if wanted < self.store.compacted_revision() {
                            return Err(expired(params));
                        }
                        (wanted, None)
                    } else {
                        first_page_at_snapshot = true;
                        (snapshot_rev, None)
                    }
                }
            }
        };

        let filtering = !params.labels.is_empty() || !params.fields.is_empty();
        let mut items = Vec::new();
        let mut from = start;
        let mut last_key: Option<String> = None;
        let mut more = false;
        loop {
            let want = limit.map_or(LIST_BATCH, |l| l - items.len()).max(1);
            let scan = self
                .store
                .scan(&gr, prefix, from.as_deref(), revision, want)
                .map_err(|ReadError::Compacted { .. }| expired(params))?;
            for entry in &scan.entries {
                let obj = self.decode(entry)?;
                last_key = Some(entry.key.clone());
                let labels = object::metadata(&obj)
                    .and_then(|m| m.get("labels"))
                    .and_then(Value::as_object);
                if params.labels.matches(labels) && params.fields.matches(&obj) {
                    items.push(obj);
                }
            }
            if !scan.more {
                break;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            from = last_key.as_ref().map(|k| format!("{k}\u{0}"));
        }

        let mut next = None;
        let mut remaining = None;
        if more && let Some(last) = &last_key {
            let relative = last.strip_prefix(prefix).unwrap_or(last);
            let token = ContinueToken::after(revision, relative);
            if !filtering {
                let count = if first_page_at_snapshot && revision == snapshot_rev {
                    Some(snapshot_live.saturating_sub(items.len()))
                } else {
                    params
                        .continue_token
                        .as_ref()
                        .filter(|t| t.revision.is_some())
                        .and_then(|t| self.store.recall_remaining(&gr, prefix, revision, &t.start))
                        .map(|before| before.saturating_sub(items.len()))
                };
                let count = match count {
                    Some(c) => c,
                    None => self
                        .store
                        .count_from(&gr, prefix, Some(&format!("{last}\u{0}")), revision)
                        .map_err(|ReadError::Compacted { .. }| expired(params))?,
                };
                self.store
                    .remember_remaining(&gr, prefix, revision, &token.start, count);
                remaining = Some(count);
            }
            next = Some(token);
        }
        Ok(ListPage {
            items,
            revision,
            next,
            remaining,
        })
    }
}

/// The 410 of a LIST whose revision was compacted, as kube-apiserver's etcd3 store answers it
/// (`interpretListError`): a continued LIST gets the inconsistent token to go on from the same
/// key (recording 05) — wherever the compaction is noticed, also by a read racing it after the
/// token's revision was checked — any other the "too old" message.
fn expired(params: &ListParams) -> StatusError {
    match &params.continue_token {
        Some(token) => {
            let mut err = StatusError::expired(EXPIRED_CONTINUE);
            err.continue_token = Some(token.inconsistent().encode());
            err
        }
        None => StatusError::expired("The resourceVersion for the provided list is too old."),
    }
}

/// Keys examined per lock acquisition when a LIST has no limit or filters heavily.
const LIST_BATCH: usize = 512;

/// kube-apiserver's message for a continue token older than the compacted revision.
pub const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

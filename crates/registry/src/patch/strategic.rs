//! Strategic merge patch (k8s.io/apimachinery `pkg/util/strategicpatch`, applied the way the
//! patch handler does: parallel deletion lists merged, unmatched nulls ignored), driven by
//! [`MergeRules`] instead of Go struct tags. Directives: `$patch: replace|delete|merge`,
//! `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`, `$retainKeys`.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::managed_fields::schema::{ListKind, TypedSchema};
use crate::strategy::ListMerge;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Which lists merge, by dotted field path (list items are transparent: the conditions of
/// `status.conditions[3]` are at `status.conditions`). Lists not named are replaced whole.
/// Read from the kind's typed schema, where the OpenAPI list extensions put them.
#[derive(Debug, Clone, Default)]
pub(crate) struct MergeRules {
    rules: Vec<(String, ListMerge)>,
}

impl MergeRules {
    /// The merging lists of a kind's typed schema: sets merge as sets, associative lists
    /// by their (first) key, as `patchStrategy`/`patchMergeKey` say upstream.
    pub(crate) fn from_schema(schema: &TypedSchema) -> Self {
        let rules = schema
            .merging_lists()
            .into_iter()
            .filter_map(|(path, kind)| match kind {
                ListKind::Set => Some((path, ListMerge::Set)),
                ListKind::Map(keys) => Some((path, ListMerge::ByKey(keys.first()?.clone()))),
                ListKind::Atomic => None,
            })
            .collect();
        Self { rules }
    }

    fn get(&self, path: &str) -> Option<ListMerge> {
        self.rules
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, rule)| rule.clone())
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Apply `patch` to `original` (both whole objects).
pub(crate) fn apply(
    original: &Value,
    patch: &Value,
    rules: &MergeRules,
) -> Result<Value, ApiError> {
    let Value::Object(patch) = patch else {
        return Err(bad_request(
            "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
        ));
    };
    let original = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let merged = merge_map(original, patch.clone(), "", rules)?;
    Ok(Value::Object(merged))
}

/// Merge a patch map into the original map at `path`: its directives first (`$patch`,
/// `$retainKeys`, `$setElementOrder/…`), then each of its fields.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    path: &str,
    rules: &MergeRules,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(directive) = patch.shift_remove(DIRECTIVE) {
        match directive.as_str() {
            Some("replace") => return Ok(strip_map(patch)),
            Some("delete") => return Ok(Map::new()),
            // Upstream rejects `merge` in a map; it is what merging does anyway.
            Some("merge") => {}
            _ => {
                return Err(bad_request(format!(
                    "unknown patch type: {directive} in map: {}",
                    Value::Object(patch)
                )));
            }
        }
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_orders(&mut original, &mut patch, path, rules)?;
    for (key, patch_value) in patch {
        merge_field(&mut original, key, patch_value, path, rules)?;
    }
    Ok(original)
}

/// Merge one field of a patch map into the original map at `path`: `null` deletes it, maps
/// merge, lists merge by their rule (or lose the items of a `$deleteFromPrimitiveList/…`),
/// anything else replaces it.
fn merge_field(
    original: &mut Map<String, Value>,
    key: String,
    patch_value: Value,
    path: &str,
    rules: &MergeRules,
) -> Result<(), ApiError> {
    let (key, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
        Some(field) => (field.to_string(), true),
        None => (key, false),
    };
    if key.is_empty() {
        return Err(bad_request(
            "invalid patch format of primitive list: the key is empty",
        ));
    }
    if patch_value.is_null() {
        original.shift_remove(&key);
        return Ok(());
    }
    let field_path = child(path, &key);
    let Some(current) = original.get_mut(&key) else {
        if !delete_list && let Some(value) = strip(patch_value) {
            original.insert(key, value);
        }
        return Ok(());
    };
    match (current, patch_value) {
        (Value::Object(current), Value::Object(patch_map)) if !delete_list => {
            *current = merge_map(std::mem::take(current), patch_map, &field_path, rules)?;
        }
        (Value::Array(current), Value::Array(patch_list)) => {
            let current_list = std::mem::take(current);
            *current = if delete_list {
                delete_from_list(current_list, &patch_list)
            } else {
                match rules.get(&field_path) {
                    Some(rule) => merge_list(current_list, patch_list, &field_path, rule, rules)?,
                    None => strip_list(patch_list),
                }
            };
        }
        _ if delete_list => {
            return Err(bad_request(
                "invalid patch format of primitive list: the deletion list must be a list",
            ));
        }
        (current, patch_value) => match strip(patch_value) {
            Some(value) => *current = value,
            None => {
                original.shift_remove(&key);
            }
        },
    }
    Ok(())
}

/// `$retainKeys`: drop every key of the original the list does not name; the patch may only
/// set named keys.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let bad = || bad_request("invalid patch format of retainKeys");
    let Value::Array(retain) = retain else {
        return Err(bad());
    };
    let named = |key: &str| retain.iter().any(|k| k.as_str() == Some(key));
    let unnamed_in_patch = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !named(k)
    });
    if unnamed_in_patch {
        return Err(bad());
    }
    original.retain(|k, _| named(k));
    Ok(())
}

/// `$setElementOrder/<field>`: merge the field's list, then order it by the directive (then
/// the patch, then the live object).
fn set_element_orders(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    path: &str,
    rules: &MergeRules,
) -> Result<(), ApiError> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for directive in directives {
        let bad = || bad_request("invalid patch format of setElementOrder list");
        let Some(Value::Array(order)) = patch.shift_remove(&directive) else {
            return Err(bad());
        };
        let field = &directive[SET_ELEMENT_ORDER.len()..];
        if field.is_empty() {
            return Err(bad());
        }
        let field_path = child(path, field);
        let rule = rules.get(&field_path);
        let merge_key = match &rule {
            Some(ListMerge::ByKey(key)) => Some(key.as_str()),
            _ => None,
        };
        let original_list = match original.get(field) {
            None => None,
            Some(Value::Array(list)) => Some(list.clone()),
            Some(_) => return Err(bad()),
        };
        let patch_list = match patch.shift_remove(field) {
            None => None,
            Some(Value::Array(list)) => Some(list),
            Some(_) => return Err(bad()),
        };
        if let Some(patch_list) = &patch_list {
            check_order(patch_list, &order, merge_key)?;
        }
        let merged = match (original_list.clone(), patch_list) {
            (Some(current), None) => current,
            (None, Some(patch_list)) => strip_list(patch_list),
            (Some(current), Some(patch_list)) => match &rule {
                Some(rule) => merge_list(current, patch_list, &field_path, rule.clone(), rules)?,
                None => strip_list(patch_list),
            },
            (None, None) => continue,
        };
        let (in_order, server_only) = partition(merged, &order, merge_key);
        let ordered = normalize_order(
            in_order,
            server_only,
            &order,
            original_list.as_deref().unwrap_or_default(),
            merge_key,
        );
        original.insert(field.to_string(), Value::Array(ordered));
    }
    Ok(())
}

/// The items of the patch list must appear in the `$setElementOrder` list in the same relative
/// order (deletions aside).
fn check_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), ApiError> {
    let items: Vec<&Value> = patch_list
        .iter()
        .filter(|item| item.get(DIRECTIVE).is_none())
        .collect();
    let mut next = 0;
    for entry in order {
        if next < items.len() && same_item(items[next], entry, merge_key) {
            next += 1;
        }
    }
    if next < items.len() {
        return Err(bad_request(format!(
            "The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n",
            Value::Array(patch_list.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

/// Two list items are the same item: equal merge-key values, or equal scalars.
fn same_item(a: &Value, b: &Value, merge_key: Option<&str>) -> bool {
    match merge_key {
        Some(key) => match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        None => a == b,
    }
}

fn position(list: &[Value], item: &Value, merge_key: Option<&str>) -> Option<usize> {
    list.iter().position(|x| same_item(x, item, merge_key))
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    path: &str,
    rule: ListMerge,
    rules: &MergeRules,
) -> Result<Vec<Value>, ApiError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if original.iter().chain(&patch).any(Value::is_array) {
        return Err(ApiError::Invalid {
            group: String::new(),
            kind: String::new(),
            name: String::new(),
            causes: vec![crate::FieldError {
                reason: "FieldValueInvalid",
                field: path.to_string(),
                message: "lists of lists are not supported".into(),
            }],
        });
    }
    let maps = original.iter().chain(&patch).any(Value::is_object);
    let (merged, original, patch, merge_key) = match &rule {
        ListMerge::Set if maps => {
            return Err(bad_request(format!(
                "cannot merge lists without merge key for {path}"
            )));
        }
        ListMerge::Set => {
            let mut merged: Vec<Value> = Vec::new();
            for item in original.iter().chain(&patch) {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            (merged, original, patch, None)
        }
        ListMerge::ByKey(key) => {
            let key = key.as_str();
            let (original, patch) = special_elements(original, patch, key)?;
            let merged = merge_by_key(original.clone(), &patch, key, path, rules)?;
            (merged, original, patch, Some(key))
        }
    };
    let (in_patch, server_only) = partition(merged, &patch, merge_key);
    Ok(normalize_order(
        in_patch,
        server_only,
        &patch,
        &original,
        merge_key,
    ))
}

/// `$patch: delete` items remove their match, `$patch: replace` replaces the whole list.
fn special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), ApiError> {
    let mut plain = Vec::new();
    let mut replace = false;
    for item in patch {
        let Value::Object(map) = &item else {
            return Err(bad_request(format!(
                "expected a map in a list merged by key {key:?}, found {item}"
            )));
        };
        match map.get(DIRECTIVE) {
            None => plain.push(item),
            Some(Value::String(d)) if d == "delete" => {
                let Some(value) = map.get(key) else {
                    return Err(no_merge_key(&item, key));
                };
                original.retain(|o| o.get(key) != Some(value));
            }
            Some(Value::String(d)) if d == "replace" => replace = true,
            Some(Value::String(d)) if d == "merge" => {
                return Err(bad_request(
                    "merging lists cannot yet be specified in the patch",
                ));
            }
            Some(other) => {
                return Err(bad_request(format!(
                    "unknown patch type: {other} in map: {item}"
                )));
            }
        }
    }
    if replace {
        return Ok((strip_list(plain), Vec::new()));
    }
    Ok((original, plain))
}

fn no_merge_key(item: &Value, key: &str) -> ApiError {
    bad_request(format!(
        "map: {item} does not contain declared merge key: {key}"
    ))
}

fn merge_by_key(
    mut original: Vec<Value>,
    patch: &[Value],
    key: &str,
    path: &str,
    rules: &MergeRules,
) -> Result<Vec<Value>, ApiError> {
    for item in patch {
        let Some(value) = item.get(key) else {
            return Err(no_merge_key(item, key));
        };
        let Value::Object(item_map) = item else {
            return Err(no_merge_key(item, key));
        };
        match original.iter().position(|o| o.get(key) == Some(value)) {
            Some(i) => {
                let current = match std::mem::take(&mut original[i]) {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                original[i] = Value::Object(merge_map(current, item_map.clone(), path, rules)?);
            }
            None => {
                if let Some(stripped) = strip(item.clone()) {
                    original.push(stripped);
                }
            }
        }
    }
    Ok(original)
}

fn delete_from_list(current: Vec<Value>, delete: &[Value]) -> Vec<Value> {
    current
        .into_iter()
        .filter(|v| !delete.contains(v))
        .collect()
}

/// Split `merged` into the items named in `by` and the rest, each keeping `merged`'s order.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: Option<&str>,
) -> (Vec<Value>, Vec<Value>) {
    merged
        .into_iter()
        .partition(|item| position(by, item, merge_key).is_some())
}

/// Upstream's `normalizeElementOrder`: patch items in `patch_order`, server-only items in
/// `server_order`, then interleaved so server-only items keep their live positions.
fn normalize_order(
    mut in_patch: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let sort_by = |items: &mut Vec<Value>, order: &[Value]| {
        items.sort_by_key(|item| position(order, item, merge_key).unwrap_or(usize::MAX));
    };
    sort_by(&mut in_patch, patch_order);
    sort_by(&mut server_only, server_order);
    // Insert each server-only item before the first patch item that follows it live.
    let mut merged = Vec::with_capacity(in_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = in_patch.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => merged.extend(left.next()),
            (None, Some(_)) => merged.extend(right.next()),
            (Some(l), Some(r)) => {
                let l_pos = position(server_order, l, merge_key);
                let r_pos = position(server_order, r, merge_key);
                match (l_pos, r_pos) {
                    (Some(lp), Some(rp)) if lp < rp => merged.extend(left.next()),
                    _ => merged.extend(right.next()),
                }
            }
        }
    }
    merged
}

fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE
        || key == RETAIN_KEYS
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
        || key.starts_with(SET_ELEMENT_ORDER)
}

/// A patch value taken as is: directives removed (a map carrying `$patch` is dropped) and
/// nulls discarded (nothing to delete in what did not exist).
fn strip(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) if map.contains_key(DIRECTIVE) => None,
        Value::Object(map) => Some(Value::Object(strip_map(map))),
        Value::Array(list) => Some(Value::Array(strip_list(list))),
        Value::Null => None,
        other => Some(other),
    }
}

fn strip_map(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter(|(k, _)| !is_directive_key(k))
        .filter_map(|(k, v)| strip(v).map(|v| (k, v)))
        .collect()
}

fn strip_list(list: Vec<Value>) -> Vec<Value> {
    list.into_iter().filter_map(strip).collect()
}

#[cfg(test)]
mod tests;

//! Field paths and field sets (structured-merge-diff's `fieldpath`): what a manager owns,
//! as a trie of path elements, and its `FieldsV1` wire form (`f:<name>`, `k:<keys>`,
//! `v:<value>`, `i:<index>`, `.` for a node that is itself a member).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// A JSON value with structured-merge-diff's total order (numbers, then strings, booleans,
/// lists, maps, null), so it can key a set item or an associative-list key.
#[derive(Debug, Clone)]
pub(crate) struct OrderedValue(pub Value);

fn rank(value: &Value) -> u8 {
    match value {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// structured-merge-diff's `value.Compare`: numbers compare numerically (ints and floats
/// alike), lists and maps element by element.
pub(crate) fn compare_values(lhs: &Value, rhs: &Value) -> Ordering {
    match (lhs, rhs) {
        (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => {
                let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                a.partial_cmp(&b).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(a), Value::String(b)) => a.cmp(b),
        (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
        (Value::Array(a), Value::Array(b)) => {
            for (x, y) in a.iter().zip(b) {
                let order = compare_values(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
            a.len().cmp(&b.len())
        }
        (Value::Object(a), Value::Object(b)) => {
            let mut a: Vec<(&String, &Value)> = a.iter().collect();
            let mut b: Vec<(&String, &Value)> = b.iter().collect();
            a.sort_by(|x, y| x.0.cmp(y.0));
            b.sort_by(|x, y| x.0.cmp(y.0));
            for ((ka, va), (kb, vb)) in a.iter().zip(&b) {
                let order = ka.cmp(kb).then_with(|| compare_values(va, vb));
                if order != Ordering::Equal {
                    return order;
                }
            }
            a.len().cmp(&b.len())
        }
        _ => rank(lhs).cmp(&rank(rhs)),
    }
}

/// Equality as structured-merge-diff sees it (1 and 1.0 are equal).
pub(crate) fn values_equal(lhs: &Value, rhs: &Value) -> bool {
    compare_values(lhs, rhs) == Ordering::Equal
}

impl PartialEq for OrderedValue {
    fn eq(&self, other: &Self) -> bool {
        values_equal(&self.0, &other.0)
    }
}
impl Eq for OrderedValue {}
impl PartialOrd for OrderedValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedValue {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_values(&self.0, &other.0)
    }
}

/// One step of a path. The variant order is structured-merge-diff's: field names sort
/// before keys, keys before values, values before indexes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PathElement {
    /// A field of a struct or a key of a map.
    Field(String),
    /// The item of an associative list whose key fields have these values (sorted by name).
    Key(Vec<(String, OrderedValue)>),
    /// The item of a set (a list of scalars) with this value.
    Value(OrderedValue),
    /// An item of an atomic list by position (never owned on its own; kept for the format).
    Index(usize),
}

/// Go's `%q`-like rendering of a scalar in a path (`value.ToString`).
fn render_value(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        other => other.to_string(),
    }
}

impl fmt::Display for PathElement {
    /// As conflicts name it: `.labels`, `[type="Running"]`, `[="a"]`, `[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("{name}={}", render_value(&value.0)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(value) => write!(f, "[={}]", render_value(&value.0)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl PathElement {
    /// The element naming the struct field or map key `name`.
    pub(crate) fn field(name: &str) -> Self {
        PathElement::Field(name.to_string())
    }

    /// The `FieldsV1` key of this element.
    fn serialize(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let map: Map<String, Value> = fields
                    .iter()
                    .map(|(name, value)| (name.clone(), value.0.clone()))
                    .collect();
                format!("k:{}", Value::Object(map))
            }
            PathElement::Value(value) => format!("v:{}", value.0),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn deserialize(text: &str) -> Result<Self, String> {
        let (kind, rest) = text
            .split_once(':')
            .filter(|(kind, _)| kind.len() == 1)
            .ok_or_else(|| format!("missing colon: {text}"))?;
        match kind {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "v" => serde_json::from_str(rest)
                .map(|v| PathElement::Value(OrderedValue(v)))
                .map_err(|e| e.to_string()),
            "k" => {
                let map: Map<String, Value> =
                    serde_json::from_str(rest).map_err(|e| e.to_string())?;
                let mut fields: Vec<(String, OrderedValue)> =
                    map.into_iter().map(|(k, v)| (k, OrderedValue(v))).collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(PathElement::Key(fields))
            }
            "i" => rest
                .parse()
                .map(PathElement::Index)
                .map_err(|e| format!("{e}")),
            _ => Err("unknown path element type".into()),
        }
    }
}

/// A path from the object's root.
pub(crate) type Path = Vec<PathElement>;

/// `.metadata.labels.team`, as conflicts and errors print a path.
pub(crate) fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of paths, as a trie: `members` are the paths that end here, `children` the
/// subtrees. A child is never empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    /// The empty set.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The set of these paths.
    pub(crate) fn from_paths<'a>(paths: impl IntoIterator<Item = &'a [PathElement]>) -> Self {
        let mut set = Set::new();
        for path in paths {
            set.insert(path);
        }
        set
    }

    /// Whether no path is in the set.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Add `path`; the empty path names nothing and is not added.
    pub(crate) fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` itself is in the set (its parents and children do not count).
    pub(crate) fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The subtree under `pe` (empty when none).
    pub(crate) fn with_prefix(&self, pe: &PathElement) -> Set {
        self.children.get(pe).cloned().unwrap_or_default()
    }

    /// Every path in either set.
    pub(crate) fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// Every path in both sets.
    pub(crate) fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, child)| {
                let common = child.intersection(other.children.get(pe)?);
                (!common.is_empty()).then(|| (pe.clone(), common))
            })
            .collect();
        Set { members, children }
    }

    /// Paths in `self` not in `other`; a parent minus its child is still the parent.
    pub(crate) fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, child)| {
                let rest = match other.children.get(pe) {
                    Some(theirs) => child.difference(theirs),
                    None => child.clone(),
                };
                (!rest.is_empty()).then(|| (pe.clone(), rest))
            })
            .collect();
        Set { members, children }
    }

    /// Like [`difference`](Self::difference), but a member of `other` also removes
    /// everything under it.
    pub(crate) fn recursive_difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter(|(pe, _)| !other.members.contains(pe))
            .filter_map(|(pe, child)| {
                let rest = match other.children.get(pe) {
                    Some(theirs) => child.recursive_difference(theirs),
                    None => child.clone(),
                };
                (!rest.is_empty()).then(|| (pe.clone(), rest))
            })
            .collect();
        Set { members, children }
    }

    /// Every path, members of a node before its subtrees (structured-merge-diff's order).
    pub(crate) fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for member in &self.members {
            let mut path = prefix.clone();
            path.push(member.clone());
            out.push(path);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    pub(super) fn members(&self) -> &BTreeSet<PathElement> {
        &self.members
    }

    pub(super) fn children(&self) -> &BTreeMap<PathElement, Set> {
        &self.children
    }

    pub(super) fn from_parts(
        members: BTreeSet<PathElement>,
        children: BTreeMap<PathElement, Set>,
    ) -> Self {
        let children = children
            .into_iter()
            .filter(|(_, c)| !c.is_empty())
            .collect();
        Set { members, children }
    }

    /// The `FieldsV1` JSON of this set.
    pub(crate) fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit(false))
    }

    fn emit(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self && !self.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for pe in keys {
            let value = match self.children.get(pe) {
                Some(child) => child.emit(self.members.contains(pe)),
                None => Map::new(),
            };
            out.insert(pe.serialize(), Value::Object(value));
        }
        out
    }

    /// Parse `FieldsV1` JSON.
    pub(crate) fn from_fields_v1(fields: &Value) -> Result<Set, String> {
        let Value::Object(map) = fields else {
            return Err("FieldsV1 must be a JSON object".into());
        };
        let mut set = Set::new();
        for (key, child) in map {
            if key == "." {
                continue;
            }
            let pe = PathElement::deserialize(key)?;
            let Value::Object(child_map) = child else {
                return Err(format!("the value of {key:?} must be a JSON object"));
            };
            if child_map.is_empty() {
                set.members.insert(pe);
                continue;
            }
            if child_map.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let sub = Set::from_fields_v1(child)?;
            if !sub.is_empty() {
                set.children.insert(pe, sub);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::field(name)
    }

    fn key(name: &str, value: &str) -> PathElement {
        PathElement::Key(vec![(name.into(), OrderedValue(json!(value)))])
    }

    #[test]
    fn fields_v1_round_trips_in_upstream_order() {
        // Recording 18, step 7: the status applier's set.
        let fields = json!({"f:status": {"f:conditions": {"k:{\"type\":\"Running\"}": {
            ".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}
        }}}});
        let set = Set::from_fields_v1(&fields).expect("parses");
        let running = [f("status"), f("conditions"), key("type", "Running")];
        assert!(set.has(&running));
        assert!(set.has(&[
            f("status"),
            f("conditions"),
            key("type", "Running"),
            f("reason")
        ]));
        assert!(!set.has(&[f("status"), f("conditions")]));
        assert_eq!(set.to_fields_v1(), fields);
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).expect("json"),
            serde_json::to_string(&fields).expect("json")
        );
    }

    #[test]
    fn set_algebra() {
        let a = Set::from_paths([&[f("a"), f("b")][..], &[f("a")][..], &[f("c")][..]]);
        let b = Set::from_paths([&[f("a")][..]]);
        assert_eq!(
            a.difference(&b),
            Set::from_paths([&[f("a"), f("b")][..], &[f("c")][..]])
        );
        assert_eq!(a.recursive_difference(&b), Set::from_paths([&[f("c")][..]]));
        assert_eq!(a.intersection(&b), b);
        assert_eq!(b.union(&a), a);
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn paths_render_like_upstream_conflicts() {
        let path = vec![f("metadata"), f("labels"), f("team")];
        assert_eq!(path_string(&path), ".metadata.labels.team");
        let path = vec![f("status"), f("conditions"), key("type", "Running")];
        assert_eq!(path_string(&path), ".status.conditions[type=\"Running\"]");
        let path = vec![
            f("metadata"),
            f("finalizers"),
            PathElement::Value(OrderedValue(json!("x"))),
        ];
        assert_eq!(path_string(&path), ".metadata.finalizers[=\"x\"]");
    }

    #[test]
    fn bad_fields_v1_is_an_error() {
        assert!(Set::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(Set::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(Set::from_fields_v1(&json!({"k:notjson": {}})).is_err());
        assert!(Set::from_fields_v1(&json!([])).is_err());
    }
}

//! Operations on a JSON value typed by a [`TypedSchema`] (structured-merge-diff's `typed`):
//! validation, the set of fields a value sets, the comparison of two values, the merge of an
//! applied configuration into a live object, and the removal of a set of fields.
//!
//! Values follow Go's unstructured conventions: a `null` map or list is an empty one, and a
//! field that is absent is `None`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::fieldpath::{OrderedValue, Path, PathElement, Set, values_equal};
use super::schema::{Atom, ListKind, ListType, MapType, Scalar, TypeId, TypedSchema};

/// A list's path elements in order, and its distinct keys with their items.
type IndexedItems = (Vec<PathElement>, Vec<(PathElement, Option<Value>)>);

/// One problem of a value against its schema: `.spec.bogus: field not declared in schema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValidationError {
    /// Where, e.g. `.spec.bogus`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl std::fmt::Display for ValidationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// structured-merge-diff's rendering of several errors.
pub(crate) fn render_errors(errors: &[ValidationError]) -> String {
    match errors {
        [one] => one.to_string(),
        _ => {
            let mut lines = vec!["errors:".to_string()];
            lines.extend(errors.iter().map(|e| format!("  {e}")));
            lines.join("\n")
        }
    }
}

/// What changed from one value to another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Comparison {
    /// Fields the new value sets that the old one did not.
    pub added: Set,
    /// Fields both set, to different values.
    pub modified: Set,
    /// Fields the old value set that the new one does not.
    pub removed: Set,
}

impl Comparison {
    /// Whether nothing changed.
    #[cfg(test)]
    pub(crate) fn is_same(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    /// Remove `excluded` (and everything under its members) from every part.
    pub(crate) fn exclude(&self, excluded: &Set) -> Comparison {
        Comparison {
            added: self.added.recursive_difference(excluded),
            modified: self.modified.recursive_difference(excluded),
            removed: self.removed.recursive_difference(excluded),
        }
    }
}

/// The shape a value takes under a type (a deduced type takes the value's own shape).
enum Shape<'a> {
    Scalar(Scalar),
    Map(std::borrow::Cow<'a, MapType>),
    List(std::borrow::Cow<'a, ListType>),
}

/// A schema with the operations over values of its root type.
pub(crate) struct Typed<'s> {
    schema: &'s TypedSchema,
}

fn as_map(value: Option<&Value>) -> Option<&Map<String, Value>> {
    value.and_then(Value::as_object)
}

fn as_list(value: Option<&Value>) -> Option<&Vec<Value>> {
    value.and_then(Value::as_array)
}

fn is_empty_map(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        _ => false,
    }
}

fn is_empty_list(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::Array(l)) => l.is_empty(),
        _ => false,
    }
}

fn child(path: &[PathElement], pe: PathElement) -> Path {
    let mut out = path.to_vec();
    out.push(pe);
    out
}

/// Go's `%v` of an unstructured value, close enough for error texts.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a value of `scalar` type was expected to be, when `value` is not one (`null` is a
/// value of every type).
fn scalar_mismatch(scalar: Scalar, value: &Value) -> Option<&'static str> {
    let ok = match (scalar, value) {
        (_, Value::Null) => true,
        (Scalar::String, Value::String(_)) => true,
        (Scalar::Numeric, Value::Number(_)) => true,
        (Scalar::Boolean, Value::Bool(_)) => true,
        (Scalar::Untyped, v) => !v.is_object() && !v.is_array(),
        _ => false,
    };
    (!ok).then_some(match scalar {
        Scalar::String => "expected string",
        Scalar::Numeric => "expected numeric (int or float)",
        Scalar::Boolean => "expected boolean",
        Scalar::Untyped => "expected any scalar",
    })
}

/// The one item of key `pe` among a list's `observed` items; none when the list lacks the
/// key or holds it twice (such items are not merged).
fn keyed_item<'v>(
    observed: &'v [(PathElement, Option<Value>)],
    pe: &PathElement,
) -> Option<&'v Value> {
    observed
        .iter()
        .find(|(p, _)| p == pe)
        .and_then(|(_, v)| v.as_ref())
}

/// One item of a merged associative list, in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MergeStep<'p> {
    /// The item of this key, merged from the live list and the configuration (either may
    /// lack it).
    Keyed(&'p PathElement),
    /// The live item at this index, whose key the configuration does not hold.
    LiveOnly(usize),
}

/// The order of a merged associative list, from the keys of the live list (`lhs`) and of the
/// configuration (`rhs`), as structured-merge-diff orders it: live items keep their place,
/// items only in the configuration follow the configuration's order around the items both
/// share.
fn merge_order<'p>(lhs: &'p [PathElement], rhs: &'p [PathElement]) -> Vec<MergeStep<'p>> {
    let mut shared: std::collections::VecDeque<&PathElement> =
        rhs.iter().filter(|pe| lhs.contains(pe)).collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs: Vec<&PathElement> = Vec::new();
    let mut steps = Vec::new();
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lhs[li];
            if *pe == rhs[ri] {
                merged_rhs.push(pe);
                steps.push(MergeStep::Keyed(pe));
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            // A shared item out of the configuration's order waits for its turn there.
            if rhs.contains(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = &lhs[li];
            if !rhs.contains(pe) {
                steps.push(MergeStep::LiveOnly(li));
                li += 1;
                continue;
            } else if merged_rhs.contains(&pe) {
                li += 1;
            }
        }
        if ri < rhs.len() {
            let pe = &rhs[ri];
            merged_rhs.push(pe);
            steps.push(MergeStep::Keyed(pe));
            ri += 1;
            if next_shared.is_some_and(|n| n == pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    steps
}

impl<'s> Typed<'s> {
    /// Operations over values of `schema`'s root type.
    pub(crate) fn new(schema: &'s TypedSchema) -> Self {
        Self { schema }
    }

    fn shape(&self, id: TypeId, value: Option<&Value>) -> Shape<'s> {
        match self.schema.atom(id) {
            Atom::Scalar(s) => Shape::Scalar(*s),
            Atom::Map(m) => Shape::Map(std::borrow::Cow::Borrowed(m)),
            Atom::List(l) => Shape::List(std::borrow::Cow::Borrowed(l)),
            Atom::Deduced => match value {
                Some(Value::Object(_)) => Shape::Map(std::borrow::Cow::Owned(MapType {
                    fields: Default::default(),
                    element: Some(self.schema.deduced()),
                    atomic: false,
                })),
                Some(Value::Array(_)) => Shape::List(std::borrow::Cow::Owned(ListType {
                    element: self.schema.deduced(),
                    kind: ListKind::Atomic,
                })),
                _ => Shape::Scalar(Scalar::Untyped),
            },
        }
    }

    fn map_field(&self, map: &MapType, key: &str) -> Option<TypeId> {
        map.fields.get(key).copied().or(map.element)
    }

    /// The path element of a list item: its key fields (associative), or its value (set).
    fn item_element(&self, list: &ListType, item: &Value) -> Result<PathElement, String> {
        match &list.kind {
            ListKind::Atomic => Err("invalid indexing of non-associative list".into()),
            ListKind::Map(keys) => {
                let Value::Object(map) = item else {
                    return Err(if item.is_null() {
                        "associative list with keys may not have a null element".into()
                    } else {
                        "associative list with keys may not have non-map elements".into()
                    });
                };
                let mut fields: Vec<(String, OrderedValue)> = keys
                    .iter()
                    .filter_map(|k| Some((k.clone(), OrderedValue(map.get(k)?.clone()))))
                    .collect();
                if !keys.is_empty() && fields.is_empty() {
                    return Err(format!(
                        "associative list with keys has an element that omits all key fields {keys:?} (and doesn't have default values for any key fields)"
                    ));
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(PathElement::Key(fields))
            }
            ListKind::Set => match item {
                Value::Object(_) => {
                    Err("associative list without keys has an element that's a map type".into())
                }
                Value::Array(_) => {
                    Err("not supported: associative list with lists as elements".into())
                }
                Value::Null => Err(
                    "associative list without keys has an element that's an explicit null".into(),
                ),
                scalar => Ok(PathElement::Value(OrderedValue(scalar.clone()))),
            },
        }
    }

    // ---- validation ----

    /// Every problem of `value` against the root type; duplicates in associative lists are
    /// problems unless `allow_duplicates`.
    pub(crate) fn validate(&self, value: &Value, allow_duplicates: bool) -> Vec<ValidationError> {
        let mut errors = Vec::new();
        self.validate_at(self.schema.root(), value, "", allow_duplicates, &mut errors);
        errors
    }

    fn validate_at(
        &self,
        id: TypeId,
        value: &Value,
        path: &str,
        allow_duplicates: bool,
        errors: &mut Vec<ValidationError>,
    ) {
        let error = |message: String| ValidationError {
            path: path.to_string(),
            message,
        };
        match self.shape(id, Some(value)) {
            Shape::Scalar(scalar) => {
                if let Some(expected) = scalar_mismatch(scalar, value) {
                    errors.push(error(format!("{expected}, got {}", go_value(value))));
                }
            }
            Shape::Map(map) => match value {
                Value::Null => {}
                Value::Object(fields) => {
                    self.validate_fields(&map, fields, path, allow_duplicates, errors)
                }
                other => errors.push(error(format!("expected map, got &{{{}}}", go_value(other)))),
            },
            Shape::List(list) => match value {
                Value::Null => {}
                Value::Array(items) => {
                    self.validate_items(&list, items, path, allow_duplicates, errors)
                }
                other => errors.push(error(format!(
                    "expected list, got &{{{}}}",
                    go_value(other)
                ))),
            },
        }
    }

    /// Validate each field of a map against its declared (or element) type.
    fn validate_fields(
        &self,
        map: &MapType,
        fields: &Map<String, Value>,
        path: &str,
        allow_duplicates: bool,
        errors: &mut Vec<ValidationError>,
    ) {
        for (key, field_value) in fields {
            let field_path = format!("{path}.{key}");
            let Some(field_id) = self.map_field(map, key) else {
                errors.push(ValidationError {
                    path: field_path,
                    message: "field not declared in schema".into(),
                });
                // Upstream stops at the first undeclared field of a map.
                return;
            };
            self.validate_at(field_id, field_value, &field_path, allow_duplicates, errors);
        }
    }

    /// Validate each item of a list; an associative list's items must also have their keys,
    /// and distinct ones unless `allow_duplicates`.
    fn validate_items(
        &self,
        list: &ListType,
        items: &[Value],
        path: &str,
        allow_duplicates: bool,
        errors: &mut Vec<ValidationError>,
    ) {
        let error = |message: String| ValidationError {
            path: path.to_string(),
            message,
        };
        let mut seen = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let pe = if list.kind == ListKind::Atomic {
                PathElement::Index(i)
            } else {
                match self.item_element(list, item) {
                    Ok(pe) => pe,
                    Err(message) => {
                        errors.push(error(format!("element {i}: {message}")));
                        return;
                    }
                }
            };
            if list.kind != ListKind::Atomic && !seen.insert(pe.clone()) && !allow_duplicates {
                errors.push(error(format!("duplicate entries for key {pe}")));
            }
            let item_path = format!("{path}{pe}");
            self.validate_at(list.element, item, &item_path, allow_duplicates, errors);
        }
    }

    // ---- the set of fields a value sets ----

    /// The fields `value` sets: leaves, list items, and maps that are empty or null.
    pub(crate) fn to_field_set(&self, value: &Value) -> Set {
        let mut set = Set::new();
        self.field_set_at(self.schema.root(), value, &mut Vec::new(), &mut set);
        set
    }

    fn field_set_at(&self, id: TypeId, value: &Value, path: &mut Path, set: &mut Set) {
        match self.shape(id, Some(value)) {
            Shape::Scalar(_) => set.insert(path),
            Shape::List(list) => {
                if list.kind == ListKind::Atomic {
                    set.insert(path);
                    return;
                }
                let Some(items) = value.as_array() else {
                    return;
                };
                let elements: Vec<Option<PathElement>> = items
                    .iter()
                    .map(|item| self.item_element(&list, item).ok())
                    .collect();
                let mut seen = BTreeSet::new();
                let mut duplicates = BTreeSet::new();
                for pe in elements.iter().flatten() {
                    if !seen.insert(pe.clone()) {
                        duplicates.insert(pe.clone());
                    }
                }
                for pe in &duplicates {
                    set.insert(&child(path, pe.clone()));
                }
                for (item, pe) in items.iter().zip(&elements) {
                    let Some(pe) = pe else { continue };
                    if duplicates.contains(pe) {
                        continue;
                    }
                    path.push(pe.clone());
                    self.field_set_at(list.element, item, path, set);
                    set.insert(path);
                    path.pop();
                }
            }
            Shape::Map(map) => {
                if map.atomic {
                    set.insert(path);
                    return;
                }
                let Some(fields) = value.as_object() else {
                    return;
                };
                for (key, field_value) in fields {
                    let field_id = self.map_field(&map, key).unwrap_or(self.schema.deduced());
                    path.push(PathElement::Field(key.clone()));
                    self.field_set_at(field_id, field_value, path, set);
                    let empty_map = field_value.as_object().is_some_and(Map::is_empty);
                    if field_value.is_null() || empty_map || !map.fields.contains_key(key) {
                        set.insert(path);
                    }
                    path.pop();
                }
            }
        }
    }

    // ---- comparison ----

    /// What changed from `lhs` to `rhs`.
    pub(crate) fn compare(&self, lhs: &Value, rhs: &Value) -> Comparison {
        let mut out = Comparison::default();
        self.compare_at(
            self.schema.root(),
            Some(lhs),
            Some(rhs),
            &mut Vec::new(),
            &mut out,
        );
        out
    }

    fn compare_leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &Path, out: &mut Comparison) {
        match (lhs, rhs) {
            (None, _) => out.added.insert(path),
            (_, None) => out.removed.insert(path),
            (Some(l), Some(r)) if !values_equal(l, r) => out.modified.insert(path),
            _ => {}
        }
    }

    fn compare_at(
        &self,
        id: TypeId,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        path: &mut Path,
        out: &mut Comparison,
    ) {
        let shape_l = self.shape(id, lhs);
        let shape_r = self.shape(id, rhs);
        let same_kind = matches!(
            (&shape_l, &shape_r),
            (Shape::Scalar(_), Shape::Scalar(_))
                | (Shape::Map(_), Shape::Map(_))
                | (Shape::List(_), Shape::List(_))
        );
        let shape = if rhs.is_some() { shape_r } else { shape_l };
        let leaf = !same_kind && lhs.is_some() && rhs.is_some()
            || match &shape {
                Shape::Scalar(_) => true,
                Shape::List(list) => {
                    list.kind == ListKind::Atomic || (is_empty_list(lhs) && is_empty_list(rhs))
                }
                Shape::Map(map) => map.atomic || (is_empty_map(lhs) && is_empty_map(rhs)),
            };
        if leaf {
            Self::compare_leaf(lhs, rhs, path, out);
            return;
        }
        match shape {
            Shape::Map(map) => {
                let empty = Map::new();
                let (l, r) = (as_map(lhs).unwrap_or(&empty), as_map(rhs).unwrap_or(&empty));
                let keys: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
                for key in keys {
                    let field_id = self.map_field(&map, key).unwrap_or(self.schema.deduced());
                    path.push(PathElement::Field(key.clone()));
                    self.compare_at(field_id, l.get(key), r.get(key), path, out);
                    path.pop();
                }
            }
            Shape::List(list) => self.compare_lists(&list, lhs, rhs, path, out),
            Shape::Scalar(_) => {}
        }
        if lhs.is_none() {
            out.added.insert(path);
        } else if rhs.is_none() {
            out.removed.insert(path);
        }
    }

    /// Items grouped by path element, in first-seen order; items that give no element are
    /// skipped.
    fn group_items<'v>(
        &self,
        list: &ListType,
        items: Option<&'v Vec<Value>>,
    ) -> Vec<(PathElement, Vec<&'v Value>)> {
        let mut groups: Vec<(PathElement, Vec<&'v Value>)> = Vec::new();
        for item in items.into_iter().flatten() {
            let Ok(pe) = self.item_element(list, item) else {
                continue;
            };
            match groups.iter_mut().find(|(p, _)| *p == pe) {
                Some((_, values)) => values.push(item),
                None => groups.push((pe, vec![item])),
            }
        }
        groups
    }

    fn compare_lists(
        &self,
        list: &ListType,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        path: &mut Path,
        out: &mut Comparison,
    ) {
        let l = self.group_items(list, as_list(lhs));
        let r = self.group_items(list, as_list(rhs));
        let mut order: Vec<&PathElement> = l.iter().map(|(pe, _)| pe).collect();
        for (pe, _) in &r {
            if !order.contains(&pe) {
                order.push(pe);
            }
        }
        fn find<'v>(groups: &[(PathElement, Vec<&'v Value>)], pe: &PathElement) -> Vec<&'v Value> {
            groups
                .iter()
                .find(|(p, _)| p == pe)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        }
        for pe in order {
            let (ll, rl) = (find(&l, pe), find(&r, pe));
            path.push(pe.clone());
            match (ll.len(), rl.len()) {
                (0..=1, 0..=1) => {
                    self.compare_at(
                        list.element,
                        ll.first().copied(),
                        rl.first().copied(),
                        path,
                        out,
                    );
                }
                (2.., 2..) => {
                    let equal =
                        ll.len() == rl.len() && ll.iter().zip(&rl).all(|(a, b)| values_equal(a, b));
                    if !equal {
                        out.modified.insert(path);
                    }
                }
                (2.., _) => {
                    if let Some(first) = rl.first() {
                        self.compare_at(list.element, None, Some(first), path, out);
                    }
                    out.removed.insert(path);
                }
                (_, _) => {
                    if let Some(first) = ll.first() {
                        self.compare_at(list.element, Some(first), None, path, out);
                    }
                    out.added.insert(path);
                }
            }
            path.pop();
        }
    }

    // ---- merge ----

    /// `rhs` (an applied configuration) merged into `lhs` (the live object).
    pub(crate) fn merge(&self, lhs: &Value, rhs: &Value) -> Result<Value, Vec<ValidationError>> {
        let mut errors = Vec::new();
        let merged = self.merge_at(self.schema.root(), Some(lhs), Some(rhs), "", &mut errors);
        if errors.is_empty() {
            Ok(merged.unwrap_or(Value::Null))
        } else {
            Err(errors)
        }
    }

    fn merge_at(
        &self,
        id: TypeId,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        path: &str,
        errors: &mut Vec<ValidationError>,
    ) -> Option<Value> {
        let keep_rhs = || rhs.or(lhs).cloned();
        let shape = self.shape(id, rhs.or(lhs));
        match shape {
            Shape::Scalar(_) => keep_rhs(),
            Shape::List(list) => {
                if list.kind == ListKind::Atomic
                    || (is_empty_list(lhs) && is_empty_list(rhs))
                    || !rhs.is_none_or(Value::is_array)
                    || !lhs.is_none_or(|l| l.is_array() || l.is_null())
                {
                    return keep_rhs();
                }
                self.merge_lists(&list, as_list(lhs), as_list(rhs), path, errors)
            }
            Shape::Map(map) => {
                if map.atomic
                    || (is_empty_map(lhs) && is_empty_map(rhs))
                    || !rhs.is_none_or(|r| r.is_object() || r.is_null())
                    || !lhs.is_none_or(|l| l.is_object() || l.is_null())
                {
                    return keep_rhs();
                }
                let empty = Map::new();
                let (l, r) = (as_map(lhs).unwrap_or(&empty), as_map(rhs).unwrap_or(&empty));
                let mut out = Map::new();
                let keys: Vec<&String> = l
                    .keys()
                    .chain(r.keys().filter(|k| !l.contains_key(*k)))
                    .collect();
                for key in keys {
                    let field_id = self.map_field(&map, key).unwrap_or(self.schema.deduced());
                    let field_path = format!("{path}.{key}");
                    if let Some(value) =
                        self.merge_at(field_id, l.get(key), r.get(key), &field_path, errors)
                    {
                        out.insert(key.clone(), value);
                    }
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
        }
    }

    /// A list's items by key, in order: every item's path element, and each distinct key
    /// once with its item (`None` for a key the live object holds twice, which is not merged).
    /// A key the configuration repeats, or an item without its key, is an error.
    fn index_items(
        &self,
        list: &ListType,
        items: Option<&Vec<Value>>,
        allow_duplicates: bool,
        path: &str,
        errors: &mut Vec<ValidationError>,
    ) -> IndexedItems {
        let mut pes = Vec::new();
        let mut observed: Vec<(PathElement, Option<Value>)> = Vec::new();
        for (i, item) in items.into_iter().flatten().enumerate() {
            let pe = match self.item_element(list, item) {
                Ok(pe) => pe,
                Err(message) => {
                    errors.push(ValidationError {
                        path: path.to_string(),
                        message: format!("element {i}: {message}"),
                    });
                    continue;
                }
            };
            match observed.iter_mut().find(|(p, _)| *p == pe) {
                Some(_) if !allow_duplicates => {
                    errors.push(ValidationError {
                        path: path.to_string(),
                        message: format!("duplicate entries for key {pe}"),
                    });
                    continue;
                }
                Some(entry) => entry.1 = None,
                None => observed.push((pe.clone(), Some(item.clone()))),
            }
            pes.push(pe);
        }
        (pes, observed)
    }

    /// Merge two associative lists (structured-merge-diff's order: live items keep their
    /// place, items only in the configuration follow the configuration's order around the
    /// items both share).
    fn merge_lists(
        &self,
        list: &ListType,
        lhs: Option<&Vec<Value>>,
        rhs: Option<&Vec<Value>>,
        path: &str,
        errors: &mut Vec<ValidationError>,
    ) -> Option<Value> {
        let before = errors.len();
        let (rhs_pes, observed_rhs) = self.index_items(list, rhs, false, path, errors);
        let (lhs_pes, observed_lhs) = self.index_items(list, lhs, true, path, errors);
        if errors.len() > before {
            return None;
        }
        // No item failed to index (that returned above): the live items line up with their
        // path elements.
        let lhs_items: Vec<&Value> = lhs.into_iter().flatten().collect();
        let mut out = Vec::new();
        for step in merge_order(&lhs_pes, &rhs_pes) {
            let (pe, l, r) = match step {
                MergeStep::Keyed(pe) => (
                    pe,
                    keyed_item(&observed_lhs, pe),
                    keyed_item(&observed_rhs, pe),
                ),
                MergeStep::LiveOnly(at) => (&lhs_pes[at], lhs_items.get(at).copied(), None),
            };
            if let Some(v) = self.merge_at(list.element, l, r, &format!("{path}{pe}"), errors) {
                out.push(v);
            }
        }
        (!out.is_empty()).then_some(Value::Array(out))
    }

    // ---- removal ----

    /// `value` without the fields of `remove` (an emptied map or list becomes `null`).
    pub(crate) fn remove_items(&self, value: &Value, remove: &Set) -> Value {
        self.remove_at(self.schema.root(), value, remove)
            .unwrap_or(Value::Null)
    }

    fn remove_at(&self, id: TypeId, value: &Value, remove: &Set) -> Option<Value> {
        match self.shape(id, Some(value)) {
            Shape::Scalar(_) => Some(value.clone()),
            Shape::List(list) => {
                let items = value.as_array().filter(|l| !l.is_empty())?;
                if list.kind == ListKind::Atomic {
                    return None;
                }
                let mut kept = Vec::new();
                for item in items {
                    let Ok(pe) = self.item_element(&list, item) else {
                        kept.push(item.clone());
                        continue;
                    };
                    if remove.has(std::slice::from_ref(&pe)) {
                        continue;
                    }
                    let subset = remove.with_prefix(&pe);
                    if subset.is_empty() {
                        kept.push(item.clone());
                    } else {
                        kept.push(
                            self.remove_at(list.element, item, &subset)
                                .unwrap_or(Value::Null),
                        );
                    }
                }
                (!kept.is_empty()).then_some(Value::Array(kept))
            }
            Shape::Map(map) => {
                let fields = value.as_object().filter(|m| !m.is_empty())?;
                if map.atomic {
                    return None;
                }
                let mut kept = Map::new();
                for (key, field_value) in fields {
                    let pe = PathElement::Field(key.clone());
                    if remove.has(std::slice::from_ref(&pe)) {
                        continue;
                    }
                    let subset = remove.with_prefix(&pe);
                    if subset.is_empty() {
                        kept.insert(key.clone(), field_value.clone());
                    } else {
                        let field_id = self.map_field(&map, key).unwrap_or(self.schema.deduced());
                        kept.insert(
                            key.clone(),
                            self.remove_at(field_id, field_value, &subset)
                                .unwrap_or(Value::Null),
                        );
                    }
                }
                (!kept.is_empty()).then_some(Value::Object(kept))
            }
        }
    }

    /// `set` plus every declared (struct) field that is the parent of one of its paths, so
    /// removing the set removes those fields too.
    pub(crate) fn ensure_named_fields_are_members(&self, set: &Set) -> Set {
        self.ensure_at(Some(self.schema.root()), set)
    }

    fn ensure_at(&self, id: Option<TypeId>, set: &Set) -> Set {
        let mut members = set.members().clone();
        let mut children = std::collections::BTreeMap::new();
        for (pe, sub) in set.children() {
            let child_id = match (pe, id.map(|i| self.schema.atom(i))) {
                (PathElement::Field(name), Some(Atom::Map(map))) => {
                    if map.fields.contains_key(name) {
                        members.insert(pe.clone());
                    }
                    map.fields.get(name).copied().or(map.element)
                }
                (PathElement::Key(_), Some(Atom::List(list))) => Some(list.element),
                _ => None,
            };
            children.insert(pe.clone(), self.ensure_at(child_id, sub));
        }
        Set::from_parts(members, children)
    }
}

/// Drop `null`s from maps, recursively, as decoding into a Go struct does: what a merge or
/// a removal leaves as `null` is an absent field.
pub(crate) fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests;

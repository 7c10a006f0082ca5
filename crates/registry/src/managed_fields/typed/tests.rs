use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::super::fieldpath::{OrderedValue, PathElement, Set};
use super::super::schema::{ListSemantics, TypedSchema, list_type};
use super::*;

fn schema() -> TypedSchema {
    let definitions = BTreeMap::from([(
        "Kind".to_string(),
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": list_type(json!({"type": "array", "items": {"type": "string"}}), ListSemantics::Set),
            }},
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "args": {"type": "array", "items": {"type": "string"}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
            }},
            "status": {"type": "object", "properties": {
                "conditions": list_type(json!({"type": "array", "items": {"type": "object", "properties": {
                    "type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"},
                }}}), ListSemantics::MapByKey("type")),
            }},
        }}),
    )]);
    TypedSchema::new(&definitions, "Kind")
}

fn f(name: &str) -> PathElement {
    PathElement::field(name)
}

fn cond(t: &str) -> PathElement {
    PathElement::Key(vec![("type".into(), OrderedValue(json!(t)))])
}

fn fields(set: &Set) -> Value {
    set.to_fields_v1()
}

#[test]
fn undeclared_fields_and_wrong_types_are_reported_with_paths() {
    let schema = schema();
    let typed = Typed::new(&schema);
    let errors = typed.validate(
        &json!({"spec": {"size": 1, "bogus": 1}, "metadata": {"name": 3}}),
        false,
    );
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        rendered,
        // In the document's order.
        vec![
            ".spec.bogus: field not declared in schema",
            ".metadata.name: expected string, got 3",
        ]
    );
    let errors = typed.validate(
        &json!({"status": {"conditions": [{"type": "A"}, {"type": "A"}]}}),
        false,
    );
    assert_eq!(
        render_errors(&errors),
        ".status.conditions: duplicate entries for key [type=\"A\"]"
    );
    assert!(
        typed
            .validate(
                &json!({"status": {"conditions": [{"type": "A"}, {"type": "A"}]}}),
                true
            )
            .is_empty()
    );
}

#[test]
fn field_sets_own_leaves_items_and_new_maps() {
    let schema = schema();
    let typed = Typed::new(&schema);
    let set = typed.to_field_set(&json!({
        "metadata": {"labels": {"team": "a"}, "annotations": {}},
        "spec": {"args": ["x"], "selector": {"a": "b"}},
        "status": {"conditions": [{"type": "Running", "status": "True"}]},
    }));
    assert_eq!(
        fields(&set),
        json!({
            "f:metadata": {"f:annotations": {}, "f:labels": {"f:team": {}}},
            "f:spec": {"f:args": {}, "f:selector": {}},
            "f:status": {"f:conditions": {"k:{\"type\":\"Running\"}": {".": {}, "f:status": {}, "f:type": {}}}},
        })
    );
    // An empty list owns nothing (recording 18, step 9).
    assert!(
        typed
            .to_field_set(&json!({"status": {"conditions": []}}))
            .is_empty()
    );
}

#[test]
fn comparison_names_added_modified_and_removed_fields() {
    let schema = schema();
    let typed = Typed::new(&schema);
    let old = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"size": 1}});
    let new = json!({"metadata": {"labels": {"a": "1", "b": "3"}, "annotations": {"n": "x"}}, "spec": {}});
    let cmp = typed.compare(&old, &new);
    assert_eq!(
        fields(&cmp.added),
        json!({"f:metadata": {"f:annotations": {".": {}, "f:n": {}}}})
    );
    assert_eq!(
        fields(&cmp.modified),
        json!({"f:metadata": {"f:labels": {"f:b": {}}}})
    );
    assert_eq!(fields(&cmp.removed), json!({"f:spec": {"f:size": {}}}));
    assert!(typed.compare(&old, &old).is_same());
}

#[test]
fn merge_keeps_live_items_and_merges_by_key() {
    let schema = schema();
    let typed = Typed::new(&schema);
    let live = json!({"status": {"conditions": [{"type": "Running", "status": "True"}]}, "spec": {"args": ["a"]}});
    let config = json!({"status": {"conditions": [{"type": "Succeeded", "status": "True"}, {"type": "Running", "reason": "R"}]}, "spec": {"args": ["b"]}});
    let merged = typed.merge(&live, &config).expect("merges");
    assert_eq!(
        merged,
        json!({"status": {"conditions": [{"type": "Succeeded", "status": "True"}, {"type": "Running", "status": "True", "reason": "R"}]}, "spec": {"args": ["b"]}})
    );
    let live = json!({"metadata": {"finalizers": ["a", "b"]}});
    let config = json!({"metadata": {"finalizers": ["c", "a"]}});
    assert_eq!(
        typed.merge(&live, &config).expect("merges"),
        json!({"metadata": {"finalizers": ["c", "a", "b"]}})
    );
}

#[test]
fn removing_items_empties_to_null() {
    let schema = schema();
    let typed = Typed::new(&schema);
    let value = json!({"status": {"conditions": [{"type": "Running"}, {"type": "Done"}]}, "spec": {"size": 2}});
    let remove = Set::from_paths([
        &[f("status"), f("conditions"), cond("Running")][..],
        &[f("status"), f("conditions"), cond("Done")][..],
        &[f("spec"), f("size")][..],
    ]);
    let mut left = typed.remove_items(&value, &remove);
    assert_eq!(left, json!({"status": {"conditions": null}, "spec": null}));
    strip_nulls(&mut left);
    assert_eq!(left, json!({"status": {}}));
    let named =
        typed.ensure_named_fields_are_members(&Set::from_paths([&[f("spec"), f("size")][..]]));
    assert!(named.has(&[f("spec")]));
}

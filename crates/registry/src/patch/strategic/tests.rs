use serde_json::json;

use super::*;

/// finalizers (set), ownerReferences (by uid), status.conditions (by type) and
/// spec.tags (set), written as the schemas write them.
fn rules() -> MergeRules {
    use crate::managed_fields::schema::{ListSemantics, list_type};
    let definitions = std::collections::BTreeMap::from([(
        "Kind".to_string(),
        json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {
                "finalizers": list_type(json!({"type": "array", "items": {"type": "string"}}), ListSemantics::Set),
                "ownerReferences": list_type(json!({"type": "array", "items": {"type": "object", "properties": {"uid": {"type": "string"}}}}), ListSemantics::MapByKey("uid")),
            }},
            "spec": {"type": "object", "properties": {
                "tags": list_type(json!({"type": "array", "items": {"type": "string"}}), ListSemantics::Set),
            }},
            "status": {"type": "object", "properties": {
                "conditions": list_type(json!({"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}}}}), ListSemantics::MapByKey("type")),
            }},
        }}),
    )]);
    MergeRules::from_schema(&TypedSchema::new(&definitions, "Kind"))
}

fn patched(original: Value, patch: Value) -> Value {
    apply(&original, &patch, &rules()).expect("patch applies")
}

#[test]
fn maps_merge_and_nulls_delete() {
    assert_eq!(
        patched(
            json!({"spec": {"a": 1, "b": 2}, "keep": true}),
            json!({"spec": {"b": null, "c": 3}, "new": {"x": null, "y": 1}})
        ),
        json!({"spec": {"a": 1, "c": 3}, "keep": true, "new": {"y": 1}})
    );
}

#[test]
fn unnamed_lists_are_replaced() {
    assert_eq!(
        patched(
            json!({"spec": {"items": [1, 2, 3]}}),
            json!({"spec": {"items": [4]}})
        ),
        json!({"spec": {"items": [4]}})
    );
}

#[test]
fn set_lists_union_keeping_live_order() {
    assert_eq!(
        patched(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"]}})
        ),
        json!({"metadata": {"finalizers": ["c", "a", "b"]}})
    );
}

#[test]
fn keyed_lists_merge_items_by_key() {
    let original = json!({"status": {"conditions": [
        {"type": "Running", "status": "True", "reason": "Go"},
        {"type": "Failed", "status": "False"},
    ]}});
    let patch = json!({"status": {"conditions": [
        {"type": "Running", "status": "False", "reason": null},
        {"type": "Succeeded", "status": "True"},
    ]}});
    assert_eq!(
        patched(original, patch),
        // Upstream's order: patch items first unless the live order places a server-only
        // item before them.
        json!({"status": {"conditions": [
            {"type": "Running", "status": "False"},
            {"type": "Succeeded", "status": "True"},
            {"type": "Failed", "status": "False"},
        ]}})
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let original = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}});
    let patch = json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}});
    assert_eq!(
        patched(original, patch),
        // New items come first, as upstream orders them.
        json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, {"uid": "1", "name": "a"}]}})
    );
}

#[test]
fn patch_delete_directive_in_list_and_map() {
    let original =
        json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}, "spec": {"x": {"y": 1}}});
    let patch = json!({
        "status": {"conditions": [{"type": "A", "$patch": "delete"}]},
        "spec": {"x": {"$patch": "delete"}},
    });
    assert_eq!(
        patched(original, patch),
        json!({"status": {"conditions": [{"type": "B"}]}, "spec": {"x": {}}})
    );
}

#[test]
fn patch_replace_directive_in_list_and_map() {
    let original = json!({
        "status": {"conditions": [{"type": "A", "status": "1"}, {"type": "B"}]},
        "spec": {"a": 1, "b": 2},
    });
    let patch = json!({
        "status": {"conditions": [{"type": "C"}, {"$patch": "replace"}]},
        "spec": {"$patch": "replace", "c": 3},
    });
    assert_eq!(
        patched(original, patch),
        json!({"status": {"conditions": [{"type": "C"}]}, "spec": {"c": 3}})
    );
}

#[test]
fn patch_merge_directive_merges_maps_and_is_rejected_in_lists() {
    assert_eq!(
        patched(
            json!({"spec": {"a": 1}}),
            json!({"spec": {"$patch": "merge", "b": 2}})
        ),
        json!({"spec": {"a": 1, "b": 2}})
    );
    let err = apply(
        &json!({"status": {"conditions": []}}),
        &json!({"status": {"conditions": [{"$patch": "merge"}]}}),
        &rules(),
    )
    .expect_err("merge in a list");
    assert_eq!(err.code(), 400);
    let err = apply(
        &json!({"spec": {}}),
        &json!({"spec": {"$patch": "bogus"}}),
        &rules(),
    )
    .expect_err("unknown directive");
    assert_eq!(err.code(), 400);
}

#[test]
fn delete_from_primitive_list() {
    assert_eq!(
        patched(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"], "finalizers": ["d"]}})
        ),
        json!({"metadata": {"finalizers": ["d", "a", "c"]}})
    );
}

#[test]
fn set_element_order_for_primitives_and_keyed_lists() {
    // What kubectl sends to remove finalizer "b" and keep the order.
    assert_eq!(
        patched(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["c", "a"],
                "$deleteFromPrimitiveList/finalizers": ["b"],
            }})
        ),
        json!({"metadata": {"finalizers": ["c", "a"]}})
    );
    let original = json!({"status": {"conditions": [{"type": "A", "v": 1}, {"type": "B"}]}});
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "B"}, {"type": "C"}, {"type": "A"}],
        "conditions": [{"type": "C"}, {"type": "A", "v": 2}],
    }});
    assert_eq!(
        patched(original, patch),
        json!({"status": {"conditions": [{"type": "B"}, {"type": "C"}, {"type": "A", "v": 2}]}})
    );
}

#[test]
fn set_element_order_must_agree_with_the_patch() {
    let err = apply(
        &json!({"spec": {"tags": ["a"]}}),
        &json!({"spec": {"$setElementOrder/tags": ["a", "b"], "tags": ["b", "a"]}}),
        &rules(),
    )
    .expect_err("order mismatch");
    assert_eq!(err.code(), 400);
}

#[test]
fn retain_keys_drops_unnamed_fields() {
    assert_eq!(
        patched(
            json!({"spec": {"a": 1, "b": 2, "c": 3}}),
            json!({"spec": {"$retainKeys": ["a", "c"], "c": 4}})
        ),
        json!({"spec": {"a": 1, "c": 4}})
    );
    let err = apply(
        &json!({"spec": {}}),
        &json!({"spec": {"$retainKeys": ["a"], "b": 1}}),
        &rules(),
    )
    .expect_err("b not retained");
    assert_eq!(err.code(), 400);
}

#[test]
fn new_values_lose_their_directives() {
    assert_eq!(
        patched(
            json!({}),
            json!({"status": {"conditions": [{"type": "A"}, {"type": "B", "$patch": "delete"}]}})
        ),
        json!({"status": {"conditions": [{"type": "A"}]}})
    );
}

#[test]
fn keyed_items_need_their_key() {
    let err = apply(
        &json!({"status": {"conditions": [{"type": "A"}]}}),
        &json!({"status": {"conditions": [{"status": "True"}]}}),
        &rules(),
    )
    .expect_err("no merge key");
    assert_eq!(err.code(), 400);
    assert!(
        err.to_string()
            .contains("does not contain declared merge key: type")
    );
}

#[test]
fn a_non_object_patch_is_rejected() {
    assert_eq!(
        apply(&json!({}), &json!([1]), &rules())
            .expect_err("array")
            .code(),
        400
    );
}

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::fieldpath::{Path, PathElement};
use super::schema::{ListSemantics, TypedSchema, list_type};
use super::typed::Typed;
use super::updater::Versioned;
use super::*;

const API_VERSION: &str = "example.test/v1";

fn schema() -> TypedSchema {
    let definitions = BTreeMap::from([(
        "Kind".to_string(),
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": list_type(json!({"type": "array", "items": {"type": "string"}}), ListSemantics::Set),
                "managedFields": list_type(json!({"type": "array", "items": {"type": "object"}}), ListSemantics::Atomic),
            }},
            "spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "b": {"type": "string"},
                "c": {"type": "string"},
            }},
            "status": {"type": "object", "properties": {
                "conditions": list_type(json!({"type": "array", "items": {"type": "object", "properties": {
                    "type": {"type": "string"}, "status": {"type": "string"},
                }}}), ListSemantics::MapByKey("type")),
            }},
        }}),
    )]);
    TypedSchema::new(&definitions, "Kind")
}

fn field_manager() -> FieldManager {
    FieldManager::new(
        "example.test",
        "Kind",
        BTreeMap::from([("v1", schema())]),
        // No status subresource: status is an ordinary field here.
        false,
    )
}

fn identity(object: &Versioned, _: &str) -> Result<Versioned, String> {
    Ok(object.clone())
}

fn write(manager: &str) -> Write<'_> {
    Write {
        api_version: API_VERSION,
        subresource: Subresource::Main,
        manager,
        convert: &identity,
    }
}

fn object(body: Value) -> Value {
    let mut object = json!({"apiVersion": API_VERSION, "kind": "Kind", "metadata": {"name": "x"}});
    merge_into(&mut object, body);
    object
}

fn merge_into(target: &mut Value, patch: Value) {
    json_patch::merge(target, &patch);
}

fn owners(object: &Value) -> Vec<(String, String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_string(),
                        e["operation"].as_str().unwrap_or_default().to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn manager_names_come_from_field_manager_or_the_user_agent() {
    assert_eq!(manager_name(Some("alice"), Some("kubectl/v1.37")), "alice");
    assert_eq!(
        manager_name(
            None,
            Some("kubectl-edit/v1.37.1 (linux/amd64) kubernetes/abcdef")
        ),
        "kubectl-edit"
    );
    assert_eq!(manager_name(Some(""), Some("a\u{7}b/1")), "ab");
    assert_eq!(manager_name(None, Some(&"x".repeat(300))).len(), 128);
    assert_eq!(manager_name(None, None), "");
}

#[test]
fn create_update_and_apply_record_their_managers() {
    let fm = field_manager();
    let empty = object(json!({}));
    let mut created = object(json!({"metadata": {"labels": {"a": "1"}}, "spec": {"a": "x"}}));
    fm.update(&write("creator"), &empty, &mut created);
    assert_eq!(
        owners(&created),
        vec![(
            "creator".into(),
            "Update".into(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}, "f:spec": {".": {}, "f:a": {}}})
        )]
    );
    // An apply of the same value shares the field; of a new one, takes nothing by force.
    let applied = fm
        .apply(
            &write("alice"),
            &created,
            &object(json!({"spec": {"a": "x", "b": "y"}})),
            false,
        )
        .expect("applies");
    assert_eq!(applied["spec"], json!({"a": "x", "b": "y"}));
    let entries = owners(&applied);
    assert_eq!(entries[0].0, "alice");
    assert_eq!(entries[0].1, "Apply");
    assert_eq!(entries[0].2, json!({"f:spec": {"f:a": {}, "f:b": {}}}));
    let err = fm
        .apply(
            &write("bob"),
            &applied,
            &object(json!({"spec": {"a": "z"}})),
            false,
        )
        .expect_err("conflict");
    assert_eq!(err.code(), 409);
    assert!(
        err.to_string().starts_with(
            "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .spec.a\nconflicts with \"creator\" using example.test/v1 at 20"
        ),
        "{err}"
    );
    let status = err.to_status();
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    assert_eq!(status["details"]["causes"][0]["field"], ".spec.a");
}

#[test]
fn reset_and_garbage_managed_fields() {
    let fm = field_manager();
    let mut live = object(json!({"spec": {"a": "x"}}));
    fm.update(&write("creator"), &object(json!({})), &mut live);
    assert!(!owners(&live).is_empty());
    let mut reset = live.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    fm.update(&write("resetter"), &live, &mut reset);
    assert!(reset["metadata"].get("managedFields").is_none());
    // Undecodable managed fields in a request fall back to the live ones.
    let mut garbage = live.clone();
    garbage["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Nope"}]);
    fm.update(&write("x"), &live, &mut garbage);
    assert_eq!(owners(&garbage), owners(&live));
}

#[test]
fn update_entries_are_capped_at_ten() {
    let fm = field_manager();
    let mut live = object(json!({}));
    for i in 0..14 {
        let mut new = live.clone();
        new["metadata"]["labels"] = json!({format!("l{i}"): "v"});
        merge_into(
            &mut new,
            json!({"metadata": {"labels": {format!("l{i}"): "v"}}}),
        );
        if let Some(labels) = live["metadata"]["labels"].as_object() {
            for (k, v) in labels {
                new["metadata"]["labels"][k] = v.clone();
            }
        }
        fm.update(&write(&format!("m{i:02}")), &live, &mut new);
        live = new;
    }
    let entries = owners(&live);
    assert_eq!(entries.len(), MAX_UPDATE_MANAGERS);
    assert!(entries.iter().any(|e| e.0 == "ancient-changes"));
    // Nothing set is left unowned.
    let owned: BTreeSet<String> = entries
        .iter()
        .flat_map(|e| {
            e.2["f:metadata"]["f:labels"]
                .as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    for i in 0..14 {
        assert!(owned.contains(&format!("f:l{i}")), "l{i} unowned");
    }
}

#[test]
fn entries_sort_apply_first_then_by_time_and_manager() {
    let managed = Managed::decode(Some(&json!([
        {"manager": "z", "operation": "Update", "apiVersion": API_VERSION, "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:a": {}}},
        {"manager": "b", "operation": "Apply", "apiVersion": API_VERSION, "time": "2026-01-01T00:00:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:b": {}}},
        {"manager": "a", "operation": "Apply", "apiVersion": API_VERSION, "time": "2026-01-01T00:00:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:c": {}}, "subresource": "status"},
    ])))
    .expect("decodes");
    let encoded = managed.encode().expect("entries");
    let order: Vec<&str> = encoded
        .as_array()
        .expect("list")
        .iter()
        .map(|e| e["manager"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(order, vec!["a", "b", "z"]);
    for (entry, want) in [
        (
            json!([{"operation": "Apply", "apiVersion": "v1"}]),
            "missing fieldsType in managed fields entry 0",
        ),
        (
            json!([{"operation": "Apply", "fieldsType": "FieldsV1"}]),
            "apiVersion must not be empty",
        ),
        (
            json!([{"operation": "Delete"}]),
            "operation must be `Apply` or `Update`",
        ),
    ] {
        assert_eq!(Managed::decode(Some(&entry)).expect_err("invalid"), want);
    }
}

// ---- the property ----

/// One step of a random history: a manager applies some fields (some values), or updates
/// (sets or removes) one.
#[derive(Debug, Clone)]
enum Step {
    Apply {
        manager: usize,
        fields: Vec<(usize, usize)>,
        force: bool,
    },
    Update {
        manager: usize,
        field: usize,
        value: Option<usize>,
    },
}

const MANAGERS: [&str; 3] = ["m0", "m1", "m2"];
/// The leaves a history plays with: spec fields, labels, a condition's status, finalizers.
const LEAVES: [&str; 6] = [
    "/spec/a",
    "/spec/b",
    "/metadata/labels/team",
    "/metadata/labels/tier",
    "/status/conditions/Ready",
    "/metadata/finalizers/f",
];
const VALUES: [&str; 2] = ["x", "y"];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (
            0..MANAGERS.len(),
            proptest::collection::vec((0..LEAVES.len(), 0..VALUES.len()), 0..4),
            proptest::bool::weighted(0.2)
        )
            .prop_map(|(manager, fields, force)| Step::Apply {
                manager,
                fields,
                force
            }),
        (
            0..MANAGERS.len(),
            0..LEAVES.len(),
            proptest::option::of(0..VALUES.len())
        )
            .prop_map(|(manager, field, value)| Step::Update {
                manager,
                field,
                value
            }),
    ]
}

/// Set (or, with `None`, remove) one leaf of an object body.
fn set_leaf(body: &mut Value, leaf: &str, value: Option<&str>) {
    match leaf {
        "/status/conditions/Ready" => {
            let conditions = &mut body["status"]["conditions"];
            if !conditions.is_array() {
                *conditions = json!([]);
            }
            let list = conditions.as_array_mut().expect("list");
            list.retain(|c| c["type"] != "Ready");
            if let Some(v) = value {
                list.push(json!({"type": "Ready", "status": v}));
            }
        }
        "/metadata/finalizers/f" => {
            let finalizers = &mut body["metadata"]["finalizers"];
            if !finalizers.is_array() {
                *finalizers = json!([]);
            }
            let list = finalizers.as_array_mut().expect("list");
            list.retain(|f| !f.as_str().is_some_and(|s| s.starts_with("f-")));
            if let Some(v) = value {
                list.push(json!(format!("f-{v}")));
            }
        }
        _ => {
            let (parent, key) = leaf.rsplit_once('/').expect("leaf");
            let mut node = &mut *body;
            for part in parent.split('/').filter(|p| !p.is_empty()) {
                if !node[part].is_object() {
                    node[part] = json!({});
                }
                node = &mut node[part];
            }
            match value {
                Some(v) => node[key] = json!(v),
                None => {
                    if let Some(map) = node.as_object_mut() {
                        map.shift_remove(key);
                    }
                }
            }
        }
    }
}

/// The leaf paths set in an object (of the leaves the history plays with), with values.
fn leaves_of(object: &Value) -> BTreeMap<Path, Value> {
    let schema = schema();
    let typed = Typed::new(&schema);
    let mut body = object.clone();
    for key in ["apiVersion", "kind"] {
        body.as_object_mut().map(|m| m.shift_remove(key));
    }
    if let Some(meta) = body["metadata"].as_object_mut() {
        meta.shift_remove("name");
        meta.shift_remove("managedFields");
    }
    // A `null` the merge leaves is an absent field once the object is decoded.
    super::typed::strip_nulls(&mut body);
    let set = typed.to_field_set(&body);
    set.paths()
        .into_iter()
        .map(|p| {
            let value = value_at(&body, &p);
            (p, value)
        })
        .filter(|(p, value)| {
            // Leaves only: scalars and set items (list items are owned through their fields;
            // empty maps and lists are nobody's business).
            let empty = value.as_object().is_some_and(|m| m.is_empty())
                || value.as_array().is_some_and(|l| l.is_empty());
            !matches!(p.last(), Some(PathElement::Key(_))) && !empty
        })
        .collect()
}

fn value_at(object: &Value, path: &[PathElement]) -> Value {
    let mut node = object.clone();
    for pe in path {
        node = match pe {
            PathElement::Field(name) => node.get(name).cloned().unwrap_or(Value::Null),
            PathElement::Key(keys) => node
                .as_array()
                .and_then(|items| {
                    items
                        .iter()
                        .find(|item| keys.iter().all(|(k, v)| item.get(k) == Some(&v.0)))
                })
                .cloned()
                .unwrap_or(Value::Null),
            PathElement::Value(v) => v.0.clone(),
            PathElement::Index(i) => node.get(*i).cloned().unwrap_or(Value::Null),
        };
    }
    node
}

fn owned_by(object: &Value) -> BTreeMap<Path, Vec<(String, bool)>> {
    let managed = Managed::decode(entries_of(object)).expect("managedFields decode");
    let mut out: BTreeMap<Path, Vec<(String, bool)>> = BTreeMap::new();
    for (id, owned) in &managed.fields {
        for path in owned.set.paths() {
            out.entry(path)
                .or_default()
                .push((id.manager.clone(), owned.applied));
        }
    }
    out
}

/// Any history of applies and updates by three managers leaves managedFields consistent:
/// every field set is owned by someone; two appliers own a field together only when both
/// applied its current value; an apply that would change another manager's field fails with
/// a conflict unless forced. The seed is printed; `SSA_PROPTEST_SEED=<n>` replays it.
#[test]
fn managed_fields_stay_consistent() {
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let seed: u64 = std::env::var("SSA_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("managed_fields_stay_consistent: seed {seed} (replay: SSA_PROPTEST_SEED={seed})");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    if let Err(err) = runner.run(&proptest::collection::vec(step(), 1..24), |steps| {
        check_history(&steps)
    }) {
        panic!("{err} (seed {seed})");
    }
}

fn check_history(steps: &[Step]) -> Result<(), TestCaseError> {
    let fm = field_manager();
    let mut live = object(json!({}));
    // What each applier applied last: leaf -> value.
    let mut applied: BTreeMap<usize, BTreeMap<Path, Value>> = BTreeMap::new();
    for step in steps {
        match step {
            Step::Apply {
                manager,
                fields,
                force,
            } => {
                let mut config = object(json!({}));
                for (leaf, value) in fields {
                    set_leaf(&mut config, LEAVES[*leaf], Some(VALUES[*value]));
                }
                let before = owned_by(&live);
                let config_leaves = leaves_of(&config);
                let live_leaves = leaves_of(&live);
                let would_take: Vec<&Path> = config_leaves
                    .iter()
                    .filter(|(path, value)| live_leaves.get(*path) != Some(value))
                    .filter(|(path, _)| {
                        before.get(*path).is_some_and(|owners| {
                            owners.iter().any(|(m, _)| m != MANAGERS[*manager])
                        })
                    })
                    .map(|(path, _)| path)
                    .collect();
                match fm.apply(&write(MANAGERS[*manager]), &live, &config, *force) {
                    Ok(new) => {
                        prop_assert!(
                            *force || would_take.is_empty(),
                            "apply took {would_take:?} from others without force"
                        );
                        applied.insert(*manager, config_leaves);
                        live = new;
                    }
                    Err(err) => {
                        prop_assert_eq!(err.code(), 409, "{}", err);
                        prop_assert!(
                            !*force && !would_take.is_empty(),
                            "unexpected conflict: {}",
                            err
                        );
                    }
                }
            }
            Step::Update {
                manager,
                field,
                value,
            } => {
                let mut new = live.clone();
                set_leaf(&mut new, LEAVES[*field], value.map(|v| VALUES[v]));
                fm.update(
                    &write(&format!("updater-{}", MANAGERS[*manager])),
                    &live,
                    &mut new,
                );
                live = new;
            }
        }
        let owners = owned_by(&live);
        for (path, value) in leaves_of(&live) {
            let who = owners.get(&path);
            prop_assert!(
                who.is_some_and(|w| !w.is_empty()),
                "{path:?} = {value} unowned after {step:?}"
            );
            let appliers: Vec<&String> = who
                .into_iter()
                .flatten()
                .filter(|(_, applied)| *applied)
                .map(|(m, _)| m)
                .collect();
            if appliers.len() > 1 {
                for manager in appliers {
                    let index = MANAGERS
                        .iter()
                        .position(|m| m == manager)
                        .expect("known manager");
                    prop_assert_eq!(
                        applied.get(&index).and_then(|leaves| leaves.get(&path)),
                        Some(&value),
                        "{} co-owns {:?} without having applied its value",
                        manager,
                        path
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn kubectl_takes_over_what_its_client_side_apply_recorded() {
    let fm = field_manager();
    let record = json!({"apiVersion": API_VERSION, "kind": "Kind", "metadata": {"name": "x", "labels": {"team": "a"}}, "spec": {"a": "1"}});
    let mut live = object(json!({
        "metadata": {"labels": {"team": "a"}, "annotations": {LAST_APPLIED_ANNOTATION: record.to_string()}},
        "spec": {"a": "1", "b": "other"},
    }));
    fm.update(
        &write("kubectl-client-side-apply"),
        &object(json!({})),
        &mut live,
    );
    // A field the record agrees with is forced for kubectl; one it never applied is not.
    let applied = fm
        .apply(
            &write("kubectl"),
            &live,
            &object(json!({"metadata": {"labels": {"team": "b"}}, "spec": {"a": "2"}})),
            false,
        )
        .expect("kubectl takes over its own client-side fields");
    assert_eq!(applied["metadata"]["labels"]["team"], "b");
    let record: Value = serde_json::from_str(
        applied["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
            .as_str()
            .expect("record kept in step"),
    )
    .expect("JSON record");
    assert_eq!(record["metadata"]["labels"]["team"], "b");
    let err = fm
        .apply(
            &write("kubectl"),
            &live,
            &object(json!({"spec": {"b": "mine"}})),
            false,
        )
        .expect_err("not in the record");
    assert_eq!(err.code(), 409);
    let other = fm
        .apply(
            &write("someone"),
            &live,
            &object(json!({"metadata": {"labels": {"team": "b"}}})),
            false,
        )
        .expect_err("only kubectl is forgiven");
    assert_eq!(other.code(), 409);
}

use super::*;
use serde_json::json;
use svm_api::dataplane::GuardedResource;

fn node(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        ready: true,
        ..Default::default()
    }
}

#[test]
fn listed_nodes_keep_their_order_and_an_unknown_one_refuses_the_rollout() {
    let found = vec![node("a"), node("b"), node("c")];
    let chosen = listed_nodes(&["c".into(), "a".into()], found.clone()).expect("known");
    let names: Vec<&str> = chosen.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["c", "a"]);
    let Err(ObserveError::Refused(refused)) = listed_nodes(&["a".into(), "z".into()], found) else {
        panic!("an unknown node must refuse the rollout");
    };
    assert_eq!(refused.reason, "UnknownNodes");
    assert!(refused.message.ends_with(": z"), "{}", refused.message);
}

#[test]
fn only_objects_the_daemon_set_controls_are_its_own() {
    let object = |uid: &str, controller: bool| json!({"metadata": {"ownerReferences": [{"uid": uid, "controller": controller}]}});
    let objects = vec![
        object("ds-1", true),
        object("ds-1", false),
        object("ds-2", true),
        json!({"metadata": {}}),
    ];
    assert_eq!(owned(objects, "ds-1"), [object("ds-1", true)]);
}

#[test]
fn selectors_become_queries_and_budgets_select_as_kube_apiserver_does() {
    let selector = json!({
        "matchLabels": {"app": "engine"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
    });
    assert_eq!(
        selector_query("s", &selector).expect("valid"),
        "app=engine,tier in (a,b)"
    );
    let bad = json!({"matchExpressions": [{"key": "k", "operator": "Near"}]});
    assert_eq!(
        selector_query("s", &bad).expect_err("bad").reason,
        "InvalidSelector"
    );
    let labels = [("app".to_string(), "db".to_string())]
        .into_iter()
        .collect();
    assert!(selects(&json!({"matchLabels": {"app": "db"}}), &labels));
    assert!(!selects(&json!({"matchLabels": {"app": "web"}}), &labels));
    assert!(selects(&json!({}), &labels), "policy/v1: empty selects all");
}

#[test]
fn a_guard_the_cluster_does_not_serve_or_let_us_list_is_named() {
    let guard = ReplicaGuard {
        name: "replicas".into(),
        resource: GuardedResource {
            group: "engine.test".into(),
            version: "v1".into(),
            resource: "replicas".into(),
        },
        ..Default::default()
    };
    let api = |code: u16| ClusterError::Api {
        code,
        reason: String::new(),
        message: String::new(),
        retry_after: None,
        continue_token: None,
        flow_control: None,
    };
    let ObserveError::Refused(missing) = guard_refused(&guard, "/apis/x", api(404)) else {
        panic!("404 refuses");
    };
    assert_eq!(missing.reason, "GuardNotServed");
    assert!(
        missing.message.contains("engine.test/v1 replicas"),
        "{}",
        missing.message
    );
    let ObserveError::Refused(forbidden) = guard_refused(&guard, "/apis/x", api(403)) else {
        panic!("403 refuses");
    };
    assert_eq!(forbidden.reason, "GuardForbidden");
    assert!(matches!(
        guard_refused(&guard, "/apis/x", api(503)),
        ObserveError::Cluster(_)
    ));
}

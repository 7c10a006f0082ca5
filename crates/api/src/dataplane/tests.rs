use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

fn guard() -> ReplicaGuard {
    ReplicaGuard {
        name: "replicas".into(),
        resource: GuardedResource {
            group: "longhorn.io".into(),
            version: "v1beta2".into(),
            resource: "replicas".into(),
        },
        node_field: "spec.nodeID".into(),
        volume_field: "spec.volumeName".into(),
        healthy: HealthRule {
            field: "status.currentState".into(),
            value: "running".into(),
            condition: String::new(),
        },
        min_healthy_elsewhere: None,
    }
}

fn rollout() -> DataPlaneRollout {
    DataPlaneRollout {
        spec: DataPlaneRolloutSpec {
            daemon_set: "engine".into(),
            replica_guards: vec![guard()],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The fields of every error `obj` gets on create (after defaulting, as the store runs it).
fn refused(mut obj: DataPlaneRollout) -> Vec<String> {
    DataPlaneRolloutStrategy.prepare_for_create(&mut obj);
    DataPlaneRolloutStrategy
        .validate(&obj)
        .into_iter()
        .map(|e| e.field)
        .collect()
}

#[test]
fn a_rollout_is_defaulted_and_its_status_cleared_on_create() {
    let mut obj = rollout();
    obj.status.nodes_total = 3;
    DataPlaneRolloutStrategy.prepare_for_create(&mut obj);
    assert_eq!(obj.spec.max_unavailable, Some(1));
    assert_eq!(obj.spec.wait_limit, DEFAULT_WAIT_LIMIT);
    assert_eq!(obj.spec.replica_guards[0].min_healthy_elsewhere, Some(1));
    assert_eq!(obj.status, DataPlaneRolloutStatus::default());
    assert!(DataPlaneRolloutStrategy.validate(&obj).is_empty());
}

/// A change that breaks a valid rollout.
type Breakage = Box<dyn Fn(&mut DataPlaneRollout)>;

#[test]
fn bad_specs_are_refused_field_by_field() {
    let cases: Vec<(&str, Breakage)> = vec![
        ("spec.daemonSet", Box::new(|o| o.spec.daemon_set.clear())),
        (
            "spec.daemonSet",
            Box::new(|o| o.spec.daemon_set = "Engine_1".into()),
        ),
        (
            "spec.nodes[1]",
            Box::new(|o| o.spec.nodes = vec!["n1".into(), "n1".into()]),
        ),
        (
            "spec.nodes[0]",
            Box::new(|o| o.spec.nodes = vec!["Node 1".into()]),
        ),
        (
            "spec.maxUnavailable",
            Box::new(|o| o.spec.max_unavailable = Some(0)),
        ),
        (
            "spec.waitLimit",
            Box::new(|o| o.spec.wait_limit = "0s".into()),
        ),
        (
            "spec.waitLimit",
            Box::new(|o| o.spec.wait_limit = "ten minutes".into()),
        ),
        (
            "spec.replicaGuards[0].name",
            Box::new(|o| o.spec.replica_guards[0].name.clear()),
        ),
        (
            "spec.replicaGuards[1].name",
            Box::new(|o| o.spec.replica_guards.push(guard())),
        ),
        (
            "spec.replicaGuards[0].resource.resource",
            Box::new(|o| o.spec.replica_guards[0].resource.resource.clear()),
        ),
        (
            "spec.replicaGuards[0].nodeField",
            Box::new(|o| o.spec.replica_guards[0].node_field = "spec..nodeID".into()),
        ),
        (
            "spec.replicaGuards[0].healthy",
            Box::new(|o| o.spec.replica_guards[0].healthy.condition = "Ready".into()),
        ),
        (
            "spec.replicaGuards[0].healthy.value",
            Box::new(|o| o.spec.replica_guards[0].healthy.value.clear()),
        ),
        (
            "spec.replicaGuards[0].minHealthyElsewhere",
            Box::new(|o| o.spec.replica_guards[0].min_healthy_elsewhere = Some(0)),
        ),
        (
            "spec.consumers.selector",
            Box::new(|o| o.spec.consumers = Some(ConsumerPods::default())),
        ),
    ];
    for (field, break_it) in cases {
        let mut obj = rollout();
        break_it(&mut obj);
        let fields = refused(obj);
        assert!(fields.iter().any(|f| f == field), "{field}: {fields:?}");
    }
}

#[test]
fn a_health_rule_is_a_field_with_its_value_or_a_condition() {
    let mut by_condition = rollout();
    by_condition.spec.replica_guards[0].healthy = HealthRule {
        condition: "Ready".into(),
        ..Default::default()
    };
    assert!(refused(by_condition).is_empty());
    let mut neither = rollout();
    neither.spec.replica_guards[0].healthy = HealthRule::default();
    assert_eq!(refused(neither), ["spec.replicaGuards[0].healthy"]);
}

#[test]
fn label_selectors_are_checked_as_kube_apiserver_does() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let expression = |operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: "storage".into(),
        operator: operator.into(),
        values,
    };
    let mut obj = rollout();
    obj.spec.node_selector = Some(LabelSelector {
        match_expressions: Some(vec![
            expression("In", None),
            expression("Exists", Some(vec!["x".into()])),
            expression("Near", None),
            expression("NotIn", Some(vec!["a".into()])),
        ]),
        ..Default::default()
    });
    assert_eq!(
        refused(obj),
        [
            "spec.nodeSelector.matchExpressions[0].values",
            "spec.nodeSelector.matchExpressions[1].values",
            "spec.nodeSelector.matchExpressions[2].operator",
        ]
    );
}

#[test]
fn the_daemon_set_is_immutable_and_status_writes_keep_the_spec() {
    let old = rollout();
    let mut new = rollout();
    new.spec.daemon_set = "other".into();
    let errs = DataPlaneRolloutStrategy.validate_update(&new, &old);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "spec.daemonSet");
    new.status.nodes_total = 2;
    DataPlaneRolloutStrategy.prepare_for_status_update(&mut new, &old);
    assert_eq!(new.spec, old.spec);
    assert_eq!(new.status.nodes_total, 2);
}

#[test]
fn status_counts_add_up_and_phases_are_known() {
    let mut obj = rollout();
    obj.status.nodes_total = 2;
    obj.status.nodes_upgraded = 3;
    obj.status.nodes = vec![
        NodeStatus {
            name: "n1".into(),
            phase: "Dancing".into(),
            ..Default::default()
        },
        NodeStatus {
            name: "n1".into(),
            phase: phases::UPGRADED.into(),
            ..Default::default()
        },
    ];
    let fields: Vec<String> = DataPlaneRolloutStrategy
        .validate_status_update(&obj, &rollout())
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(
        fields,
        [
            "status.nodesUpgraded",
            "status.nodes[0].phase",
            "status.nodes[1].name"
        ]
    );
}

#[test]
fn the_table_row_says_nodes_upgraded_of_total_and_the_phase() {
    let mut obj = rollout();
    obj.metadata.name = Some("engines".into());
    obj.status.nodes_total = 5;
    obj.status.nodes_upgraded = 2;
    obj.status.revision = "engine-7d9f".into();
    obj.status.conditions = vec![Condition {
        type_: RUNNING.into(),
        status: "True".into(),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        message: String::new(),
        observed_generation: None,
        reason: "Started".into(),
    }];
    let row = DataPlaneRolloutStrategy.table_row(&obj);
    assert_eq!(row.len(), DataPlaneRolloutStrategy.table_columns().len());
    assert_eq!(row[1], "engine");
    assert_eq!(row[2], "2/5");
    assert_eq!(row[3], "engine-7d9f");
    assert_eq!(row[4], "Running");
}

#[test]
fn the_wire_form_round_trips_and_other_versions_are_refused() {
    let mut obj = rollout();
    DataPlaneRolloutStrategy.prepare_for_create(&mut obj);
    obj.status.nodes = vec![NodeStatus {
        name: "n1".into(),
        evicted_pod_uid: "u1".into(),
        cordoned_by_us: true,
        ..Default::default()
    }];
    let wire = DataPlaneRolloutStrategy
        .encode("v1alpha1", &obj)
        .expect("encode");
    assert_eq!(wire["apiVersion"], "storage.svm-apiserver.io/v1alpha1");
    assert_eq!(wire["kind"], KIND);
    assert_eq!(wire["status"]["nodes"][0]["evictedPodUID"], "u1");
    assert_eq!(wire["spec"]["replicaGuards"][0]["nodeField"], "spec.nodeID");
    let back = DataPlaneRolloutStrategy
        .decode("v1alpha1", wire.clone())
        .expect("decode");
    assert_eq!(back, obj);
    assert!(DataPlaneRolloutStrategy.decode("v1", wire).is_err());
}

#[test]
fn the_schema_names_every_type_it_refers_to() {
    let definitions = schema::definitions("v1alpha1");
    let names: BTreeSet<&str> = definitions.iter().map(|(n, _)| n.as_str()).collect();
    let text = serde_json::to_string(&definitions).expect("json");
    let prefix = "#/components/schemas/io.svm-apiserver.storage.v1alpha1.";
    for reference in text.split(prefix).skip(1) {
        let local = reference.split('"').next().unwrap_or_default();
        let full = format!("io.svm-apiserver.storage.v1alpha1.{local}");
        assert!(
            names.contains(full.as_str()),
            "{full} is referred to but not defined"
        );
    }
    assert!(
        names.contains(
            DataPlaneRolloutStrategy
                .definition_name("v1alpha1")
                .as_str()
        )
    );
}

//! The migrator's no-op write (`svm_cluster::objects::touch`: a server-side apply of the
//! object's identity and listed resourceVersion) on the real kube-apiserver: it re-encodes
//! every object in etcd, leaves everything else of it as it was (the user's data, labels,
//! managedFields — no entry of ours; an object that had none has none after), writes nothing
//! when the stored bytes are current, and a user's write that lands between the read and the
//! write wins: the stale write is a 409 (`Touched::Conflict`) and changes nothing.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::control_plane::{ControlPlane, assets};
use crate::world::create_many;
use svm_cluster::objects::{list_metadata, touch};
use svm_cluster::resources::resolve;
use svm_cluster::{ClusterClient, ObjectRef, Touched};

const WIDGETS: usize = 40;
const PREFIX: &str = "/registry/example.test/widgets/demo/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_no_op_write_re_encodes_every_object_and_changes_nothing_else() {
    let Some(assets) = assets("the_no_op_write_re_encodes_every_object_and_changes_nothing_else")
    else {
        return;
    };
    let plane = ControlPlane::start(&assets, &[]);
    let kubectl = plane.kubectl();
    kubectl.ok(&["create", "namespace", "demo"]);
    let crd = kube_double::crd::manifest("example.test", "widgets", "Widget", &["v1", "v2"]);
    kubectl.ok_stdin(&["apply", "-f", "-"], &crd.to_string());
    crate::world::wait_established(&kubectl, &["crd/widgets.example.test"]);
    let gvk = GroupVersionKind::gvk("example.test", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(plane.client().await, "demo", &ApiResource::from_gvk(&gvk));
    let payload = "x".repeat(10 * 1024);
    create_many(&widgets, WIDGETS, 16, |i| {
        json!({
            "apiVersion": "example.test/v1", "kind": "Widget",
            "metadata": {"name": format!("w-{i:03}"), "labels": {"owner": "user"}},
            "spec": {"size": i, "data": payload},
        })
    })
    .await;
    // One object whose managedFields were cleared (`[{}]` clears them): an apply must not
    // give it any.
    widgets
        .patch(
            "w-000",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": [{}]}})),
        )
        .await
        .expect("clear managedFields");
    assert_eq!(stored_in(&plane, "example.test/v1").await, WIDGETS);

    let cluster = ClusterClient::connect(Some(&plane.kubeconfig))
        .await
        .expect("client")
        .expect("a cluster");
    let resource = resolve(&cluster, "example.test", "", "widgets")
        .await
        .expect("resolved");
    kubectl.ok(&[
        "patch",
        "crd",
        "widgets.example.test",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},
            {"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
    ]);
    // kube-apiserver swaps the CRD's storage asynchronously: until it has, a write re-encodes
    // in v1, and the test would see fewer objects moved.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let before = everything(&widgets).await;
    assert!(
        before[0]["metadata"].get("managedFields").is_none(),
        "{:#}",
        before[0]["metadata"]
    );
    let refs = list_metadata(&cluster, &resource, 500, None)
        .await
        .expect("list")
        .items;
    assert_eq!(refs.len(), WIDGETS);

    // A user edits one object after it was listed: its stale write must be refused.
    let raced = refs[5].clone();
    widgets
        .patch(
            &raced.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"edited": "yes"}}})),
        )
        .await
        .expect("the user's write");
    let mut outcomes = Vec::new();
    for object in &refs {
        outcomes.push(touch(&cluster, &resource, object).await.expect("touch"));
    }
    let rewritten = outcomes
        .iter()
        .filter(|o| **o == Touched::Rewritten)
        .count();
    assert_eq!(rewritten, WIDGETS - 1, "{outcomes:?}");
    assert_eq!(outcomes[5], Touched::Conflict);
    assert_eq!(
        stored_in(&plane, "example.test/v2").await,
        WIDGETS,
        "every widget re-encoded in v2 (the raced one by the user's own write)"
    );

    let after = everything(&widgets).await;
    for (old, new) in before.iter().zip(&after) {
        let name = old["metadata"]["name"].as_str().unwrap_or_default();
        if name == raced.name {
            assert_eq!(
                new["metadata"]["labels"]["edited"], "yes",
                "the user's write kept"
            );
            continue;
        }
        assert_ne!(
            old["metadata"]["resourceVersion"],
            new["metadata"]["resourceVersion"]
        );
        assert_eq!(
            without_resource_version(old),
            without_resource_version(new),
            "{name}"
        );
    }

    // Stored in v2 already: the same write again changes no byte, so nothing is written —
    // but for the object without managedFields, which the apply gives kube-apiserver's
    // `before-first-apply` entry every time, cleared again at once (two writes).
    let refs = list_metadata(&cluster, &resource, 500, None)
        .await
        .expect("list")
        .items;
    for object in &refs {
        let expected = if object.name == "w-000" {
            Touched::Rewritten
        } else {
            Touched::AlreadyCurrent
        };
        let touched = touch(&cluster, &resource, object).await.expect("touch");
        assert_eq!(touched, expected, "{}", object.name);
    }
    let again = everything(&widgets).await;
    assert_eq!(
        without_resource_version(&again[0]),
        without_resource_version(&after[0])
    );
    assert_eq!(again[1..], after[1..]);
    built_in_configmaps(&plane, &cluster).await;
    deleted_after_the_list(&plane, &cluster, &widgets, &resource).await;
}

/// A user deletes an object after the migration listed it: the write finds it gone and does
/// not bring it back. (An apply without the listed uid would: kube-apiserver creates an
/// applied object that does not exist, the resourceVersion notwithstanding — recording 09e,
/// step B5.)
async fn deleted_after_the_list(
    plane: &ControlPlane,
    cluster: &ClusterClient,
    widgets: &Api<DynamicObject>,
    resource: &svm_cluster::ResolvedResource,
) {
    let refs = list_metadata(cluster, resource, 500, None)
        .await
        .expect("list")
        .items;
    let deleted = refs[7].clone();
    assert!(!deleted.uid.is_empty(), "the list gives each object's uid");
    widgets
        .delete(&deleted.name, &Default::default())
        .await
        .expect("the user's delete");
    assert_eq!(
        touch(cluster, resource, &deleted).await.expect("touch"),
        Touched::Gone
    );
    assert!(
        widgets.get_opt(&deleted.name).await.expect("get").is_none(),
        "the deleted widget stays deleted"
    );
    assert_eq!(stored_in(plane, "example.test/v2").await, WIDGETS - 1);

    // Deleted and created again under the same name (a new uid): a stale resourceVersion, so
    // a 409 before the uid is compared (not the 422 of a changed uid), and the new object
    // is left as its creator wrote it.
    let replaced = refs[8].clone();
    widgets
        .delete(&replaced.name, &Default::default())
        .await
        .expect("the user's delete");
    let created = widgets
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "example.test/v1", "kind": "Widget",
                "metadata": {"name": replaced.name, "namespace": "demo"},
                "spec": {"size": 1},
            }))
            .expect("a widget"),
        )
        .await
        .expect("the user's create");
    assert_eq!(
        touch(cluster, resource, &replaced).await.expect("touch"),
        Touched::Conflict
    );
    let now = widgets.get(&replaced.name).await.expect("get");
    assert_eq!(now.metadata.uid, created.metadata.uid);
    assert_eq!(
        now.metadata.resource_version,
        created.metadata.resource_version
    );
}

/// A ConfigMap (built-in, nothing to re-encode): the write is answered with the same
/// resourceVersion and changes nothing of it.
async fn built_in_configmaps(plane: &ControlPlane, cluster: &ClusterClient) {
    let kubectl = plane.kubectl();
    kubectl.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "demo",
        "--from-literal=k=v",
    ]);
    let configmaps: Api<DynamicObject> = Api::namespaced_with(
        plane.client().await,
        "demo",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    let before = serde_json::to_value(configmaps.get("settings").await.expect("get")).unwrap();
    let resource = resolve(cluster, "", "", "configmaps")
        .await
        .expect("resolved");
    let object = ObjectRef {
        namespace: Some("demo".into()),
        name: "settings".into(),
        uid: before["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .into(),
        resource_version: before["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .into(),
    };
    assert_eq!(
        touch(cluster, &resource, &object).await.expect("touch"),
        Touched::AlreadyCurrent
    );
    let after = serde_json::to_value(configmaps.get("settings").await.expect("get")).unwrap();
    assert_eq!(before, after);
}

/// Every widget as served (v1), in name order.
async fn everything(widgets: &Api<DynamicObject>) -> Vec<Value> {
    let mut all: Vec<Value> = widgets
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    all.sort_by_key(|o| {
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    all
}

fn without_resource_version(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    object
}

/// Widgets etcd holds encoded as `api_version` (a custom resource is stored as JSON).
async fn stored_in(plane: &ControlPlane, api_version: &str) -> usize {
    plane
        .etcd_get_prefix(PREFIX)
        .await
        .iter()
        .filter(|(_, value)| {
            serde_json::from_slice::<Value>(value)
                .is_ok_and(|object| object["apiVersion"] == api_version)
        })
        .count()
}

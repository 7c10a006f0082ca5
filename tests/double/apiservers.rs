//! Apiserver identities and the StorageVersion API (recordings 12, 13).

use super::*;

#[tokio::test]
async fn identity_leases_change_object_on_restart() {
    let double = KubeDouble::builder().hostname("vm").start().await.unwrap();
    let client = kube_client(&double).await;
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    let selector = ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver");

    let before = leases.list(&selector).await.unwrap().items;
    assert_eq!(before.len(), 1);
    let lease = &before[0];
    // The name recording 12 shows for hostname "vm".
    assert_eq!(
        lease.metadata.name.as_deref(),
        Some("apiserver-wlv32tlttr4jl3gtroqexyxapa")
    );
    assert_eq!(
        double.first_apiserver(),
        "apiserver-wlv32tlttr4jl3gtroqexyxapa"
    );
    let labels = lease.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "vm");
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(3600));
    let holder = spec.holder_identity.unwrap();
    assert!(holder.starts_with("apiserver-wlv32tlttr4jl3gtroqexyxapa_"));

    double.restart_apiserver(double.first_apiserver()).unwrap();
    let after = leases.list(&selector).await.unwrap().items;
    assert_eq!(after.len(), 1, "the old lease is deleted, not left behind");
    assert_eq!(after[0].metadata.name, lease.metadata.name);
    assert_ne!(after[0].metadata.uid, lease.metadata.uid);
    assert_ne!(
        after[0].spec.clone().unwrap().holder_identity.unwrap(),
        holder
    );

    let second = double.add_apiserver("vm2").unwrap();
    assert_eq!(second, identity_lease_name("vm2"));
    assert_eq!(leases.list(&selector).await.unwrap().items.len(), 2);
    double.remove_apiserver(&second).unwrap();
    assert_eq!(leases.list(&selector).await.unwrap().items.len(), 1);
    // Other leases are not identity leases.
    let other = leases
        .list(&ListParams::default().labels("apiserver.kubernetes.io/identity!=kube-apiserver"))
        .await
        .unwrap();
    assert!(other.items.is_empty());
}

#[tokio::test]
async fn storage_versions_report_agreement_and_disagreement() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    let svs: Api<StorageVersion> = Api::all(client.clone());
    let first = double.first_apiserver().to_string();

    let cm = svs.get("core.configmaps").await.unwrap();
    let status = cm.status.clone().unwrap();
    assert_eq!(status.common_encoding_version.as_deref(), Some("v1"));
    let entries = status.storage_versions.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].api_server_id, first);
    assert_eq!(entries[0].encoding_version, "v1");
    let condition = &status.conditions.unwrap()[0];
    assert_eq!(
        (condition.type_.as_str(), condition.status.as_str()),
        ("AllEncodingVersionsEqual", "True")
    );
    assert_eq!(condition.reason, "CommonEncodingVersionSet");

    // CRDs are stored as apiextensions.k8s.io/v1beta1 (13); leases decode v1beta1 too.
    let crds = svs
        .get("apiextensions.k8s.io.customresourcedefinitions")
        .await
        .unwrap();
    assert_eq!(
        crds.status.unwrap().common_encoding_version.as_deref(),
        Some("apiextensions.k8s.io/v1beta1")
    );
    let leases = svs.get("coordination.k8s.io.leases").await.unwrap();
    assert_eq!(
        leases.status.unwrap().storage_versions.unwrap()[0].decodable_versions,
        vec![
            "coordination.k8s.io/v1".to_string(),
            "coordination.k8s.io/v1beta1".to_string()
        ]
    );
    // Custom resources have no entry.
    let err = svs.get("example.test.widgets").await.unwrap_err();
    assert_eq!(kube_status(err).code, 404);

    // A rolling upgrade: a second instance already encodes configmaps as v2.
    let second = double.add_apiserver("upgraded").unwrap();
    double
        .set_apiserver_storage_version(&second, "configmaps", "v2")
        .unwrap();
    let split = svs.get("core.configmaps").await.unwrap().status.unwrap();
    assert_eq!(split.common_encoding_version, None);
    assert_eq!(split.storage_versions.unwrap().len(), 2);
    let condition = &split.conditions.unwrap()[0];
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "CommonEncodingVersionUnset")
    );
    // Discovery still answers from the first instance ...
    assert_eq!(double.storage_version("configmaps").as_deref(), Some("v1"));
    // ... until requests land on the upgraded one.
    double.serve_from(&second).unwrap();
    assert_eq!(double.storage_version("configmaps").as_deref(), Some("v2"));
    let created = double
        .create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new", "namespace": "demo"}}))
        .unwrap();
    assert_eq!(created["metadata"]["name"], "new");
    assert_eq!(
        double
            .stored("configmaps", Some("demo"), "new")
            .unwrap()
            .encoding,
        "v2"
    );

    // The upgrade completes: everyone agrees again.
    double.set_storage_version("configmaps", "v2").unwrap();
    let agreed = svs.get("core.configmaps").await.unwrap().status.unwrap();
    assert_eq!(agreed.common_encoding_version.as_deref(), Some("v2"));
    assert_eq!(agreed.conditions.unwrap()[0].status, "True");

    // A restart keeps the id, so the entries stay.
    double.restart_apiserver(&first).unwrap();
    assert_eq!(
        svs.get("core.configmaps")
            .await
            .unwrap()
            .status
            .unwrap()
            .storage_versions
            .unwrap()
            .len(),
        2
    );

    // Without the API the group is not served at all.
    let without = KubeDouble::builder()
        .storage_version_api(false)
        .start()
        .await
        .unwrap();
    assert_eq!(
        Http::new(&without)
            .get("/apis/internal.apiserver.k8s.io/v1alpha1/storageversions")
            .await
            .status,
        404
    );
}

/// A built-in's storage version changes only when kube-apiserver restarts with a new binary
/// or flags: moving it (on every instance, or on one) replaces the identity leases.
#[tokio::test]
async fn moving_a_builtin_storage_version_restarts_the_apiservers() {
    let double = KubeDouble::start().await.unwrap();
    let client = kube_client(&double).await;
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    let selector = ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver");
    let second = double.add_apiserver("vm2").unwrap();
    let holders = |items: Vec<Lease>| -> std::collections::BTreeMap<String, String> {
        items
            .into_iter()
            .map(|l| {
                (
                    l.metadata.name.unwrap_or_default(),
                    l.spec.and_then(|s| s.holder_identity).unwrap_or_default(),
                )
            })
            .collect()
    };
    let before = holders(leases.list(&selector).await.unwrap().items);
    assert_eq!(before.len(), 2);

    double.set_storage_version("configmaps", "v2").unwrap();
    let after = holders(leases.list(&selector).await.unwrap().items);
    assert_eq!(after.len(), 2);
    for (name, holder) in &before {
        assert_ne!(&after[name], holder, "{name} restarted");
    }
    // Custom resources move through their CRD: no restart.
    double.create_crd(kube_double::crd::widgets()).unwrap();
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    assert_eq!(holders(leases.list(&selector).await.unwrap().items), after);

    // One instance's encoding: only it restarts.
    double
        .set_apiserver_storage_version(&second, "configmaps", "v3")
        .unwrap();
    let last = holders(leases.list(&selector).await.unwrap().items);
    assert_ne!(last[&second], after[&second]);
    let first = double.first_apiserver().to_string();
    assert_eq!(last[&first], after[&first]);
}

#[tokio::test]
async fn identity_leases_are_renewed_by_the_same_holder() {
    let double = KubeDouble::builder()
        .lease_renewal(std::time::Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let id = double.first_apiserver().to_string();
    let lease = |d: &KubeDouble| {
        let l = d
            .get("leases.coordination.k8s.io", Some("kube-system"), &id)
            .unwrap();
        (
            l["spec"]["holderIdentity"].as_str().unwrap().to_string(),
            l["spec"]["renewTime"].as_str().unwrap().to_string(),
            l["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string(),
        )
    };
    let before = lease(&double);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = lease(&double);
    assert_eq!(after.0, before.0, "same holder");
    assert_ne!(after.1, before.1, "renewTime moves");
    assert_ne!(
        after.2, before.2,
        "a new resourceVersion (a MODIFIED event)"
    );
}

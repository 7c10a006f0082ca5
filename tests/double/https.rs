//! HTTPS.

use super::*;

#[tokio::test]
async fn https_with_the_kube_client_and_a_fresh_ca() {
    let double = KubeDouble::builder().tls(true).start().await.unwrap();
    assert!(double.url().starts_with("https://127.0.0.1:"));
    let client = kube_client(&double).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    assert_eq!(
        leases
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let discovery = Discovery::new(client).run_aggregated().await.unwrap();
    assert!(discovery.has_group("apiextensions.k8s.io"));

    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(double.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let api = http
        .get(format!("{}/api", double.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
    // Plain HTTP on the TLS port is not served.
    let plain = reqwest::get(format!("http://{}/api", double.addr())).await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
}

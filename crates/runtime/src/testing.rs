//! Test support for the controllers' own tests (the `testing` feature; never in the product).

/// `app` played as the target cluster's kube-apiserver on a free loopback port, and a client
/// of it. Tests that use it play kube-apiserver, and say so.
pub async fn played_cluster(app: axum::Router) -> svm_cluster::ClusterClient {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let url: http::Uri = format!("http://127.0.0.1:{port}").parse().expect("url");
    svm_cluster::ClusterClient::from_config(kube::Config::new(url)).expect("client")
}

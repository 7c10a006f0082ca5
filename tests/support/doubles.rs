//! The test doubles the suites and benches start: a configured kube-double with a namespace
//! and the `widgets.example.test` CRD (served in v1 and v2, stored in v1).

use kube_double::{Builder, KubeDouble};

/// Starts `builder`'s double with `namespace` and the widgets CRD.
pub async fn with_widgets(builder: Builder, namespace: &str) -> KubeDouble {
    let double = builder.start().await.expect("start the double");
    double.ensure_namespace(namespace).expect("namespace");
    double.create_crd(kube_double::crd::widgets()).expect("crd");
    double
}

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};

use super::*;

/// Lines as kube-apiserver v1.36.2 wrote them (its /metrics with an aescbc configuration and
/// automatic reload; the KMS v2 lines in the form of upstream's own test of them).
const SCRAPE: &str = r#"# HELP apiserver_encryption_config_controller_last_config_info [ALPHA] Information about the last applied encryption configuration with hash as label, split by apiserver identity.
# TYPE apiserver_encryption_config_controller_last_config_info gauge
apiserver_encryption_config_controller_last_config_info{apiserver_id_hash="sha256:73095bbbe8f317654631b5a70d7c53951e472e19c3daa5b71a50958a5e82991b",hash="sha256:adb21a9277818e372bce7b524ccf70869add95a62aae5efa6a49405c0d3b62c3"} 1
apiserver_encryption_config_controller_automatic_reloads_total{apiserver_id_hash="sha256:73095bbbe8f317654631b5a70d7c53951e472e19c3daa5b71a50958a5e82991b",status="success"} 1
apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds{apiserver_id_hash="sha256:73095bbbe8f317654631b5a70d7c53951e472e19c3daa5b71a50958a5e82991b",key_id_hash="sha256:old",provider_name="kms-provider",transformation_type="to_storage"} 1.674865558833728e+09
apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds{apiserver_id_hash="sha256:73095bbbe8f317654631b5a70d7c53951e472e19c3daa5b71a50958a5e82991b",key_id_hash="sha256:new",provider_name="kms-provider",transformation_type="to_storage"} 1.774865558833728e+09
apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds{apiserver_id_hash="sha256:73095bbbe8f317654631b5a70d7c53951e472e19c3daa5b71a50958a5e82991b",key_id_hash="sha256:newest-read",provider_name="kms-provider",transformation_type="from_storage"} 1.874865558833728e+09
"#;

/// The identity lease whose name hashes to the id above (read from the same kube-apiserver).
const LEASE: &str = "apiserver-wlv32tlttr4jl3gtroqexyxapa";

#[test]
fn the_id_hash_is_the_lease_names_sha256_as_kube_apiserver_labels_it() {
    assert_eq!(
        apiserver_id_hash(LEASE),
        "sha256:73095bbbe8f317654631b5a70d7c53951e472e19c3daa5b71a50958a5e82991b"
    );
}

#[test]
fn a_scrape_gives_the_config_hash_and_the_newest_write_key() {
    let found = parse(SCRAPE);
    assert_eq!(found.len(), 1);
    let generation = &found[&apiserver_id_hash(LEASE)];
    assert_eq!(
        generation.config_hash.as_deref(),
        Some("sha256:adb21a9277818e372bce7b524ccf70869add95a62aae5efa6a49405c0d3b62c3")
    );
    // The newest to_storage use; a read (from_storage) of an old key says nothing of writes.
    assert_eq!(
        generation.write_key_id_hash.as_deref(),
        Some("kms-provider=sha256:new")
    );
    // Escapes, spaces and odd lines are read or skipped, never a panic.
    let odd = "x{a=\"q\\\"uote\\\\\",b=\"\"} 1\n{} 1\nno_value\nname{unterminated=\"x\n\
               apiserver_encryption_config_controller_last_config_info{apiserver_id_hash=\"a\", hash=\"h\"} 1 1700000000\n";
    assert_eq!(
        parse(odd)["a"].config_hash.as_deref(),
        Some("h"),
        "a timestamp after the value"
    );
    assert!(parse("").is_empty());
}

fn generation(config: &str) -> Generation {
    Generation {
        config_hash: Some(config.into()),
        write_key_id_hash: None,
    }
}

#[test]
fn reload_times_are_read_per_apiserver() {
    let text = "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds{apiserver_id_hash=\"sha256:a\",status=\"success\"} 1.7956903005312033e+09\n\
                apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds{apiserver_id_hash=\"sha256:a\",status=\"failure\"} 1.8e+09\n";
    let reloads = parse_reloads(text);
    assert_eq!(reloads.len(), 1);
    assert!((reloads["sha256:a"] - 1_795_690_300.531).abs() < 0.01);
}

#[test]
fn a_generation_is_agreed_only_when_every_live_apiserver_reports_it() {
    let (a, b) = ("apiserver-a".to_string(), "apiserver-b".to_string());
    let live = [a.clone(), b.clone()];
    let mut reports = BTreeMap::from([(apiserver_id_hash(&a), generation("k2"))]);
    assert_eq!(
        agreed(&reports, Some(&live)),
        Err(Waiting::Unreported(vec![b.clone()]))
    );
    reports.insert(apiserver_id_hash(&b), generation("k1"));
    assert_eq!(agreed(&reports, Some(&live)), Err(Waiting::Disagree(2)));
    reports.insert(apiserver_id_hash(&b), generation("k2"));
    assert_eq!(agreed(&reports, Some(&live)), Ok(generation("k2")));
    // Without the lease watch, the apiservers that answered are the set.
    assert_eq!(agreed(&reports, None), Ok(generation("k2")));
    assert_eq!(agreed(&BTreeMap::new(), None), Err(Waiting::Nothing));
}

#[tokio::test]
async fn a_restarted_or_gone_apiservers_report_is_dropped() {
    // Port 9 on loopback: nothing is sent, only the bookkeeping is exercised.
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let cluster = ClusterClient::from_config(config).expect("client");
    let mut observer =
        EncryptionObserver::new(cluster, TriggerMetrics::default(), "secrets".into());
    let (a, b) = ("apiserver-a".to_string(), "apiserver-b".to_string());
    for name in [&a, &b] {
        observer
            .reports
            .insert(apiserver_id_hash(name), generation("k2"));
        observer.answered.push(apiserver_id_hash(name));
    }
    let both = [
        (a.clone(), "a_1".to_string()),
        (b.clone(), "b_1".to_string()),
    ];
    observer.keep_current(&both);
    let names = [a.clone(), b.clone()];
    assert_eq!(
        agreed(&observer.reports, Some(&names)),
        Ok(generation("k2"))
    );
    // b restarted (same lease name, a new holder): what it said before is dropped.
    observer.keep_current(&[(a.clone(), "a_1".into()), (b.clone(), "b_2".into())]);
    assert_eq!(
        agreed(&observer.reports, Some(&names)),
        Err(Waiting::Unreported(vec![b.clone()]))
    );
    // a stopped: its report goes too.
    observer.keep_current(&[(b.clone(), "b_2".into())]);
    assert!(observer.reports.is_empty());
}

/// What the fake apiserver below saw.
#[derive(Default)]
struct Seen {
    metrics_gets: usize,
    events: Vec<serde_json::Value>,
}

/// Plays kube-apiserver for one thing only: an RBAC that does not grant `get` on `/metrics`
/// (its 403 Status, as kube-apiserver words it), a ready `/readyz`, and the events API.
async fn forbidding_apiserver() -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(seen): State<Arc<Mutex<Seen>>>| async move {
                seen.lock().expect("lock").metrics_gets += 1;
                (
                    StatusCode::FORBIDDEN,
                    r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:serviceaccount:svm-system:svm-apiserver\" cannot get path \"/metrics\"","reason":"Forbidden","details":{},"code":403}"#,
                )
            }),
        )
        .route("/readyz", get(|| async { "ok" }))
        .route(
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
            post(
                |State(seen): State<Arc<Mutex<Seen>>>, body: axum::body::Bytes| async move {
                    let event: serde_json::Value =
                        serde_json::from_slice(&body).unwrap_or_default();
                    seen.lock().expect("lock").events.push(event.clone());
                    (StatusCode::CREATED, axum::Json(event))
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

#[tokio::test]
async fn a_forbidden_metrics_endpoint_is_told_once_and_agrees_on_nothing() {
    let (url, seen) = forbidding_apiserver().await;
    let config = kube::Config::new(url.parse().expect("url"));
    let cluster = ClusterClient::from_config(config).expect("client");
    let metrics = TriggerMetrics::default();
    let mut observer = EncryptionObserver::new(cluster, metrics.clone(), "secrets".into());
    let live = vec![(LEASE.to_string(), format!("{LEASE}_1"))];
    for _ in 0..3 {
        assert_eq!(observer.poll(Some(&live)).await, None, "nothing is agreed");
    }
    assert_eq!(metrics.encryption_observed.get(), 0);
    let forbidden = ResultLabel {
        result: "forbidden".into(),
    };
    assert_eq!(
        metrics.encryption_scrapes.get_or_create(&forbidden).get(),
        3
    );
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.metrics_gets, 3);
    // One Warning Event for the outage, not one per poll, on the StorageState of secrets.
    assert_eq!(seen.events.len(), 1, "{:?}", seen.events);
    let event = &seen.events[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "EncryptionNotObserved");
    assert_eq!(event["regarding"]["kind"], "StorageState");
    assert_eq!(event["regarding"]["name"], "secrets");
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|n| n.contains("/metrics")),
        "{event}"
    );
}

#[test]
fn a_protobuf_scrape_says_what_the_text_says() {
    use svm_runtime::prometheus::proto::build::{family, gauge};
    // The samples of the recorded text, as kube-apiserver sends them when asked for protobuf.
    let mut body = Vec::new();
    for name in FAMILIES {
        let metrics = text_samples(SCRAPE)
            .into_iter()
            .filter(|(family, _, _)| family == name)
            .map(|(_, labels, value)| {
                let pairs: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                gauge(&pairs, value)
            })
            .collect();
        body.extend(family(name, metrics));
    }
    let content_type = Some(
        "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
    );
    let decoded = samples(content_type, &body).expect("a delimited protobuf body");
    let from_text = parse(SCRAPE);
    assert!(!from_text.is_empty());
    assert_eq!(generations(&decoded), from_text);
    assert_eq!(reloads(&decoded), parse_reloads(SCRAPE));
    // A body cut short is no reading (not an apiserver without the metrics).
    assert_eq!(samples(content_type, &body[..body.len() - 3]), None);
    // Text is read as text.
    assert_eq!(
        generations(&samples(Some("text/plain; version=0.0.4"), SCRAPE.as_bytes()).expect("text")),
        from_text
    );
}

#[test]
fn the_real_kube_apiservers_two_expositions_give_one_generation_and_reload() {
    // Recorded by hack/record-metrics.sh: aescbc, one automatic reload
    // (tests/fixtures/metrics/README.md).
    let text =
        include_str!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-encryption.txt");
    let protobuf =
        include_bytes!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-encryption.pb");
    let content_type = Some(
        "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
    );
    let from_protobuf = samples(content_type, protobuf).expect("delimited protobuf");
    let from_text = samples(Some("text/plain; version=0.0.4"), text.as_bytes()).expect("text");
    let apiserver = apiserver_id_hash(LEASE);
    for read in [&from_protobuf, &from_text] {
        let generations = generations(read);
        assert_eq!(generations.len(), 1);
        assert_eq!(
            generations[&apiserver],
            generation("sha256:8a7bb23e20da60ca82682dfc3ec0040a5e91fe3dac7d66942eb3e4ed15d2eb37"),
            "aescbc: a configuration hash, no KMS write key"
        );
        let reloads = reloads(read);
        assert_eq!(reloads.len(), 1);
        assert_eq!(reloads[&apiserver], 1.7959231709433486e9);
    }
}

//! Watch over real HTTPS: exact event sequences from a resourceVersion, 410 on a compacted
//! revision, bookmarks, watch-list (sendInitialEvents) and a kube-rs watcher kept in sync.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::etcd::EtcdServer;
use crate::support::fixtures::svm;
use crate::support::server::{Backend, ServerProcess};
use crate::support::wait::eventually_async_every;

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

/// Reads newline-delimited watch events from a streaming response.
struct EventReader {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
}

impl EventReader {
    async fn open(client: &reqwest::Client, url: String) -> EventReader {
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        EventReader {
            stream: resp.bytes_stream().boxed(),
            buf: Vec::new(),
        }
    }

    /// The next event, or `None` when the server ends the stream. Panics after 30 s of silence
    /// (a hung watch is a failure, not a slow pass).
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("event is JSON"));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.stream.next())
                .await
                .expect("no watch event within 30s");
            match chunk {
                Some(Ok(bytes)) => self.buf.extend_from_slice(&bytes),
                Some(Err(e)) => panic!("watch stream failed: {e}"),
                None => return None,
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    async fn next_change(&mut self) -> Option<Value> {
        loop {
            let event = self.next().await?;
            if event["type"] != "BOOKMARK" {
                return Some(event);
            }
        }
    }
}

async fn create(client: &reqwest::Client, base: &str, name: &str) -> Value {
    let resp = client
        .post(format!("{base}{SVMS}"))
        .json(&svm(name))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    resp.json().await.unwrap()
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_resource_version_gets_exactly_the_later_events_in_order() {
    for backend in ["embedded", "etcd"] {
        let etcd;
        let server = if backend == "etcd" {
            etcd = EtcdServer::start();
            ServerProcess::start(Backend::Etcd(&etcd.endpoint()))
        } else {
            ServerProcess::start(Backend::Embedded)
        };
        let client = server.http_client();
        let base = server.url.clone();

        let a = create(&client, &base, "a").await;
        let start = rv(&a);
        let b = create(&client, &base, "b").await;
        let patched: Value = client
            .patch(format!("{base}{SVMS}/a"))
            .header("Content-Type", "application/merge-patch+json")
            .body(r#"{"metadata":{"labels":{"step":"two"}}}"#)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let deleted = client
            .delete(format!("{base}{SVMS}/b"))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 200);

        let mut events = EventReader::open(
            &client,
            format!("{base}{SVMS}?watch=1&resourceVersion={start}"),
        )
        .await;
        let e1 = events.next_change().await.unwrap();
        assert_eq!(
            (
                e1["type"].as_str(),
                e1["object"]["metadata"]["name"].as_str()
            ),
            (Some("ADDED"), Some("b")),
            "{backend}"
        );
        assert_eq!(rv(&e1["object"]), rv(&b));
        let e2 = events.next_change().await.unwrap();
        assert_eq!(
            (
                e2["type"].as_str(),
                e2["object"]["metadata"]["name"].as_str()
            ),
            (Some("MODIFIED"), Some("a")),
            "{backend}"
        );
        assert_eq!(rv(&e2["object"]), rv(&patched));
        assert_eq!(e2["object"]["metadata"]["labels"]["step"], "two");
        assert_eq!(e2["object"]["apiVersion"], "storagemigration.k8s.io/v1");
        let e3 = events.next_change().await.unwrap();
        assert_eq!(
            (
                e3["type"].as_str(),
                e3["object"]["metadata"]["name"].as_str()
            ),
            (Some("DELETED"), Some("b")),
            "{backend}"
        );
        assert!(rv(&e3["object"]) > rv(&e2["object"]), "{backend}");

        // Live events continue after the replay; an older version sees them in its own shape.
        let mut alpha = EventReader::open(
            &client,
            format!(
                "{base}/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations?watch=true&resourceVersion={}",
                rv(&e3["object"])
            ),
        )
        .await;
        create(&client, &base, "c").await;
        let e4 = events.next_change().await.unwrap();
        assert_eq!(
            (
                e4["type"].as_str(),
                e4["object"]["metadata"]["name"].as_str()
            ),
            (Some("ADDED"), Some("c"))
        );
        let e4a = alpha.next_change().await.unwrap();
        assert_eq!(
            e4a["object"]["apiVersion"],
            "storagemigration.k8s.io/v1alpha1"
        );
        assert_eq!(e4a["object"]["metadata"]["name"], "c");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_revision_gets_an_error_event_with_410() {
    let etcd = EtcdServer::start();
    let server = ServerProcess::start(Backend::Etcd(&etcd.endpoint()));
    let client = server.http_client();
    let base = server.url.clone();
    let first = create(&client, &base, "old").await;
    create(&client, &base, "middle").await;
    let last = create(&client, &base, "new").await;
    // Compact etcd past the revision after the first object's, as kube-apiserver's compactor
    // would: a watch from `first` needs `first + 1`, which is gone.
    let mut etcd_client = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .unwrap();
    etcd_client.compact(rv(&last) as i64, None).await.unwrap();

    let mut events = EventReader::open(
        &client,
        format!("{base}{SVMS}?watch=1&resourceVersion={}", rv(&first)),
    )
    .await;
    let event = events.next().await.unwrap();
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!(event["object"]["kind"], "Status");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(
        event["object"]["message"]
            .as_str()
            .unwrap()
            .contains("too old resource version")
    );
    assert!(
        events.next().await.is_none(),
        "the stream ends after the ERROR event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_and_watch_list_with_the_initial_events_end_bookmark() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let base = server.url.clone();
    let mut names = Vec::new();
    for i in 0..5 {
        names.push(format!("m{i}"));
        create(&client, &base, &names[i]).await;
    }

    // Watch-list: every current object as ADDED, then the initial-events-end bookmark.
    let mut events = EventReader::open(
        &client,
        format!("{base}{SVMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
    )
    .await;
    let mut seen = Vec::new();
    let bookmark = loop {
        let e = events.next().await.unwrap();
        match e["type"].as_str().unwrap() {
            "ADDED" => seen.push(
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ),
            "BOOKMARK" => break e,
            other => panic!("unexpected {other} before the bookmark: {e}"),
        }
    };
    seen.sort();
    assert_eq!(seen, names);
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let list_rv: u64 = bookmark["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(list_rv > 0);
    // Then live events.
    let later = create(&client, &base, "later").await;
    let e = events.next_change().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(rv(&e["object"]), rv(&later));

    // An idle watch with allowWatchBookmarks gets periodic bookmarks carrying the current RV.
    let mut idle = EventReader::open(
        &client,
        format!(
            "{base}{SVMS}?watch=1&allowWatchBookmarks=true&resourceVersion={}",
            rv(&later)
        ),
    )
    .await;
    let b = idle.next().await.unwrap();
    assert_eq!(b["type"], "BOOKMARK", "{b}");
    assert_eq!(b["object"]["kind"], "StorageVersionMigration");
    assert!(
        b["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= rv(&later)
    );

    // Invalid watch-list parameters are a plain 422, not a stream (recording 10b).
    let resp = client
        .get(format!("{base}{SVMS}?watch=1&sendInitialEvents=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["reason"], "Invalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_watcher_stays_in_sync_through_a_thousand_changes() {
    use kube::api::{
        Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    };
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let server = ServerProcess::start(Backend::Embedded);
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let gvk = GroupVersionKind::gvk("storagemigration.k8s.io", "v1", "StorageVersionMigration");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "storageversionmigrations");
    let api: Api<DynamicObject> = Api::all_with(client, &resource);

    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    // Streaming lists (sendInitialEvents) exercise the initial-events-end bookmark path.
    let stream = watcher(api.clone(), watcher::Config::default().streaming_lists())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let handle = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                panic!("watcher error: {e}");
            }
        }
    });
    reader.wait_until_ready().await.unwrap();

    // 1 000 changes: 200 creates, 600 label patches, 100 deletes, 100 final patches.
    let mut changes = 0;
    for i in 0..200 {
        let obj: DynamicObject = serde_json::from_value(svm(&format!("w{i}"))).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
        changes += 1;
    }
    for round in 0..3 {
        for i in 0..200 {
            let patch = json!({"metadata": {"labels": {"round": round.to_string()}}});
            api.patch(
                &format!("w{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
            changes += 1;
        }
    }
    for i in (0..200).step_by(2) {
        api.delete(&format!("w{i}"), &Default::default())
            .await
            .unwrap();
        changes += 1;
    }
    for i in (1..200).step_by(2).take(100) {
        let patch = json!({"metadata": {"labels": {"final": "yes"}}});
        api.patch(
            &format!("w{i}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
        changes += 1;
    }
    assert_eq!(changes, 1000);

    // The reflector converges on exactly what a fresh list shows.
    let listed = api.list(&Default::default()).await.unwrap();
    let want: std::collections::BTreeMap<String, String> = listed
        .items
        .iter()
        .map(|o| {
            (
                o.metadata.name.clone().unwrap(),
                o.metadata.resource_version.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(want.len(), 100);
    // Polled as often as before: the reflector catches up within moments.
    eventually_async_every(
        Duration::from_secs(30),
        Duration::from_millis(100),
        "the watcher's cache holding what a fresh list shows",
        async || {
            let have: std::collections::BTreeMap<String, String> = reader
                .state()
                .iter()
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap(),
                        o.metadata.resource_version.clone().unwrap(),
                    )
                })
                .collect();
            if have == want {
                return Ok(());
            }
            let differ = want.iter().filter(|(k, v)| have.get(*k) != Some(v)).count();
            Err(format!(
                "{} cached vs {} listed, {differ} of those missing or at another resourceVersion",
                have.len(),
                want.len()
            ))
        },
        async || String::new(),
    )
    .await;
    assert!(reader.state().iter().all(|o| {
        o.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("final").map(String::as_str) == Some("yes"))
    }));
    handle.abort();
}

//! A status written back by a client that cannot know `status.progress`: mid-migration, a Go
//! program reads the migration with client-go's typed client and PUTs its status back. Its
//! types are upstream's, whose status message has no field 1000, so the body it sends has no
//! progress. The checkpoint stays, the migrator does not take the write for another
//! migrator's, and after a restart the migration goes on from the checkpoint: every object
//! counted once, no page done again beyond the one in flight.

use std::time::Duration;

use k8s_pb::api::storagemigration::v1beta1 as svm_pb;
use prost::Message;
use reqwest::StatusCode;

use crate::harness::{Harness, double_with_configmaps_to_move, migrated, tail};
use crate::support::protobuf_fields::{PROTOBUF, envelope, open};

const OBJECTS: usize = 3_000;
const CHUNK: usize = 100;
/// PATCHes in flight when the server is killed: done but not yet checkpointed.
const IN_FLIGHT: usize = 8;
const ITEM: &str = "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations";
/// What client-go's typed clients send when they prefer protobuf.
const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";
/// client-go's default User-Agent for a program named `status-writer` (the manager its writes
/// are recorded for).
const CLIENT_GO_USER_AGENT: &str = "status-writer/v0.0.0 (linux/amd64) kubernetes/$Format";

/// Plays a Kubernetes client: a Go program using client-go's typed client for
/// storagemigration.k8s.io/v1beta1 (k8s.io/api's types, which kube-controller-manager uses
/// too), that GETs a migration in protobuf and PUTs its status back unchanged — as upstream's
/// `generated.proto` messages (k8s-pb's), so what our server sends in field 1000 is dropped on
/// decoding, as Go's decoder drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_written_back_by_client_go_keeps_the_checkpoint_and_the_migration_goes_on_from_it()
{
    let double = double_with_configmaps_to_move(OBJECTS).await;
    // Every namespace also holds its kube-root-ca.crt ConfigMap, as in a real cluster.
    let total: usize = double.stored_summary("configmaps").values().sum();
    double.reset_counters();
    let mut h = Harness::start(
        double,
        &[
            // Slow enough to write the status back and restart the server mid-migration; in
            // pages, so where a restart resumes is in the double's LIST log.
            "--qps=300",
            "--burst=30",
            "--chunk-size=100",
            "--object-concurrency=8",
            "--watch-list-max-objects=0",
        ],
    );
    h.create_migration("kept", "", "configmaps").await;
    h.wait_for("kept", Duration::from_secs(120), |m| migrated(m) >= 500)
        .await;

    let answered = write_status_back(&h, "kept").await;
    let stored = h.get_migration("kept").await.expect("the migration");
    let kept = migrated(&stored);
    assert!(
        kept >= 500 && stored["status"]["progress"]["continueToken"].is_string(),
        "the checkpoint went with client-go's write: {stored:#}"
    );
    // client-go got the object back in the version it spoke, with the status it sent.
    assert!(
        answered
            .status
            .unwrap_or_default()
            .conditions
            .iter()
            .any(|c| c.r#type.as_deref() == Some("Running")),
        "{stored:#}"
    );

    // The running migrator goes on: its next checkpoint lands (it would have stopped on a
    // status it did not write, taking it for another migrator's).
    h.wait_for("kept", Duration::from_secs(60), |m| migrated(m) > kept)
        .await;
    let log = h.server.log();
    assert!(
        !log.contains("another migrator works on this migration"),
        "{}",
        tail(&log, 30)
    );

    // A restart reads the checkpoint from the store: the one client-go's write would have
    // taken.
    h.server.kill();
    let lists_before = h.double.pages_of("configmaps").len();
    h.server.restart();
    let m = h.wait_succeeded("kept", Duration::from_secs(180)).await;
    assert_eq!(migrated(&m), total as i64, "{m:#}");
    let lists = h.double.pages_of("configmaps");
    let resumed = lists.get(lists_before).expect("a LIST after the restart");
    assert!(
        resumed.continue_token.is_some(),
        "restarted from the first page: {resumed:?}"
    );
    let counters = h.double.counters();
    assert_eq!(counters.writes_performed_for("configmaps"), total as u64);
    let patches = counters.requests_for("patch", "configmaps");
    assert!(
        patches <= (total + CHUNK + IN_FLIGHT) as u64,
        "{patches} PATCHes for {total} objects: more than the page in flight done again"
    );
    // Preflight's LIST once (a run with a checkpoint skips it), then the pages, one of them
    // at most done again.
    let pages = total.div_ceil(CHUNK) + 1;
    assert!(
        (pages..=pages + 1).contains(&lists.len()),
        "{} LISTs for {pages} pages",
        lists.len()
    );
}

/// The migration `name` as client-go reads it in v1beta1: the protobuf body, opened.
async fn v1beta1_of(h: &Harness, name: &str) -> crate::support::protobuf_fields::Body {
    let response = h
        .http
        .get(h.url(&format!("{ITEM}/{name}")))
        .header("Accept", CLIENT_GO_ACCEPT)
        .header("User-Agent", CLIENT_GO_USER_AGENT)
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.bytes().await.expect("a body");
    open(&bytes).expect("a protobuf body")
}

/// client-go's read-modify-write of the status (`RetryOnConflict` around a GET and an
/// `UpdateStatus`): the migrator checkpoints meanwhile, so a 409 reads again. Returns the
/// object the PUT answered.
async fn write_status_back(h: &Harness, name: &str) -> svm_pb::StorageVersionMigration {
    for _ in 0..10 {
        let got = v1beta1_of(h, name).await;
        assert_eq!(
            (got.api_version.as_str(), got.kind.as_str()),
            ("storagemigration.k8s.io/v1beta1", "StorageVersionMigration")
        );
        let read = svm_pb::StorageVersionMigration::decode(&got.raw[..]).expect("upstream's");
        // Our answer carries progress in field 1000; upstream's message has no such field.
        assert!(
            got.raw.len() > read.encoded_len(),
            "no field beyond upstream's in our answer: the test sends nothing it would drop"
        );
        let body = envelope(
            "storagemigration.k8s.io/v1beta1",
            "StorageVersionMigration",
            read.encode_to_vec(),
        );
        let response = h
            .http
            .put(h.url(&format!("{ITEM}/{name}/status")))
            .header("Accept", CLIENT_GO_ACCEPT)
            .header("Content-Type", PROTOBUF)
            .header("User-Agent", CLIENT_GO_USER_AGENT)
            .body(body)
            .send()
            .await
            .expect("PUT");
        let status = response.status();
        let bytes = response.bytes().await.expect("a body");
        if status == StatusCode::CONFLICT {
            continue;
        }
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let answered = open(&bytes).expect("a protobuf answer");
        return svm_pb::StorageVersionMigration::decode(&answered.raw[..]).expect("upstream's");
    }
    panic!("ten conflicts in a row writing the status back");
}

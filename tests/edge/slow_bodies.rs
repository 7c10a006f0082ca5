//! No slot pinned by a slow client: 200 authenticated clients send their request bodies one byte
//! a second, again and again, holding every mutating in-flight slot, while `kubectl get svm`
//! (the real kubectl, as a user of its own) keeps answering; each trickled request is answered
//! at its `--request-timeout` with kube-apiserver's 504 while its client is still sending, its
//! connection closed; when they stop, every slot and connection is given back.

use std::time::{Duration, Instant};

use kube_double::{AccessRule, KubeDouble, TokenUser};
use support::stats::percentile;

use crate::support;
use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};
use crate::trickle::{BODY_BYTES, Tricklers, token_kubeconfig};
use crate::{client, support::wait};

const TRICKLERS: usize = 200;
const KUBECTL_RUNS: usize = 10;

/// `kubectl get svm` `runs` times: the latency of each, failing the test on a failure.
fn kubectl_gets(kubectl: &Kubectl, runs: usize) -> Vec<Duration> {
    (0..runs)
        .map(|_| {
            let asked = Instant::now();
            let listed = kubectl.run(&["get", "svm"]);
            assert!(listed.ok, "kubectl get svm failed: {}", listed.stderr);
            assert!(listed.stdout.contains("slow-bodies"), "{}", listed.stdout);
            asked.elapsed()
        })
        .collect()
}

fn millis(samples: &[Duration], p: f64) -> f64 {
    percentile(samples, p).unwrap_or_default().as_secs_f64() * 1e3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_get_their_504_at_the_timeout_and_kubectl_keeps_answering() {
    let _heavy = crate::HEAVY.lock().await;
    let cluster = KubeDouble::start().await.expect("double");
    cluster.add_token("trickler-token", TokenUser::new("trickler", &["tricklers"]));
    cluster.add_token("reader-token", TokenUser::new("reader", &["readers"]));
    cluster.set_access_rules(vec![
        AccessRule::allow().user("trickler"),
        AccessRule::allow().user("reader"),
        // kubectl's discovery.
        AccessRule::allow().user("reader").path("*"),
    ]);
    let dir = tempfile::tempdir().expect("dir");
    let cluster_kubeconfig = dir.path().join("cluster.kubeconfig");
    std::fs::write(&cluster_kubeconfig, cluster.kubeconfig_yaml()).expect("kubeconfig");
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            &format!(
                "--authentication-kubeconfig={}",
                cluster_kubeconfig.display()
            ),
            &format!(
                "--authorization-kubeconfig={}",
                cluster_kubeconfig.display()
            ),
            "--authentication-skip-lookup",
            "--request-timeout=3s",
        ],
    );
    let admin = Kubectl::new(&server.kubeconfig);
    let created = admin.run_with_stdin(
        &["create", "-f", "-"],
        Some(
            "apiVersion: storagemigration.k8s.io/v1\nkind: StorageVersionMigration\n\
             metadata: {name: slow-bodies}\nspec: {resource: {group: apps, resource: deployments}}\n",
        ),
    );
    assert!(created.ok, "{}", created.stderr);
    // kubectl as a user of its own: its requests count in flight and are authorized by the
    // cluster, as the tricklers'.
    let reader_kubeconfig = dir.path().join("reader.kubeconfig");
    token_kubeconfig(&server, &reader_kubeconfig, "reader-token");
    let reader = Kubectl::new(&reader_kubeconfig);
    let idle = tokio::task::block_in_place(|| kubectl_gets(&reader, KUBECTL_RUNS));

    let mutating = || {
        client::metric_where(
            &server,
            "apiserver_current_inflight_requests",
            "request_kind=\"mutating\"",
        )
    };
    let started = Instant::now();
    let tricklers = Tricklers::start(&server, TRICKLERS, "trickler-token").await;
    // Hang guard only: the slots fill as the clients connect.
    let held = wait::eventually_async(
        Duration::from_secs(120),
        "the tricklers holding most mutating in-flight slots",
        async || {
            let held = mutating().await;
            if held >= (TRICKLERS / 2) as f64 {
                Ok(held)
            } else {
                Err(format!("{held} held"))
            }
        },
    )
    .await;
    println!(
        "{TRICKLERS} clients trickling {BODY_BYTES}-byte bodies at 1 byte/s: {held} mutating slots held after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let mut loaded = Vec::with_capacity(KUBECTL_RUNS);
    let mut held_during = Vec::with_capacity(KUBECTL_RUNS);
    for _ in 0..KUBECTL_RUNS {
        loaded.extend(tokio::task::block_in_place(|| kubectl_gets(&reader, 1)));
        held_during.push(mutating().await);
    }
    let ended = tricklers.finish().await;
    println!(
        "kubectl get svm: idle p50 {:.0} ms, max {:.0} ms; with {TRICKLERS} tricklers p50 {:.0} ms, max {:.0} ms (mutating slots held between runs: {held_during:?})",
        millis(&idle, 0.5),
        millis(&idle, 1.0),
        millis(&loaded, 0.5),
        millis(&loaded, 1.0),
    );

    // Every trickled request was answered, while its client was still sending, and its
    // connection closed: 504 at the timeout, or 429 when every slot was already held.
    let timed_out: Vec<_> = ended.iter().filter(|e| e.code == 504).collect();
    let refused = ended.iter().filter(|e| e.code == 429).count();
    let odd: Vec<_> = ended
        .iter()
        .filter(|e| !(e.code == 504 || e.code == 429) || !e.closed_by_server)
        .collect();
    let answered: Vec<Duration> = timed_out.iter().map(|e| e.answered_after).collect();
    println!(
        "{} trickled requests: {} × 504 (answered after p50 {:.2}s, max {:.2}s, {:.0} body bytes of {BODY_BYTES} sent at most), {refused} × 429",
        ended.len(),
        timed_out.len(),
        millis(&answered, 0.5) / 1e3,
        millis(&answered, 1.0) / 1e3,
        timed_out.iter().map(|e| e.sent).max().unwrap_or(0) as f64,
    );
    assert!(
        odd.is_empty(),
        "not answered and closed: {:?}",
        &odd[..odd.len().min(5)]
    );
    assert!(
        timed_out.len() >= TRICKLERS,
        "every client had a request time out"
    );
    assert!(
        timed_out.iter().all(|e| e.sent < BODY_BYTES),
        "answered before the body was in"
    );
    let terminations = client::metric_where(
        &server,
        "apiserver_request_terminations_total",
        "code=\"504\"",
    )
    .await;
    assert_eq!(terminations, timed_out.len() as f64);

    // Every slot and connection given back.
    wait::eventually_async(
        Duration::from_secs(60),
        "the mutating in-flight slots given back",
        async || match mutating().await {
            0.0 => Ok(()),
            held => Err(format!("{held} held")),
        },
    )
    .await;
    let open = wait::eventually_async(
        Duration::from_secs(60),
        "the tricklers' connections closed",
        async || {
            let open = client::metric(&server, "svm_apiserver_open_connections").await;
            if open < 10.0 {
                Ok(open)
            } else {
                Err(format!("{open} open"))
            }
        },
    )
    .await;
    println!("after they stopped: 0 mutating slots held, {open} connections open");
    // The server kept serving throughout.
    tokio::task::block_in_place(|| kubectl_gets(&reader, 1));
}

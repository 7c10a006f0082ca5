//! TokenReview amplification: a flood of random bearer tokens costs the cluster a bounded number
//! of TokenReviews (counted by the test double, which answers them), each reviewed one gets its
//! 401, the rest 429 with Retry-After, and a known token keeps working all along.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube_double::{AccessRule, KubeDouble, TokenUser};
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const RANDOM_TOKENS: usize = 10_000;
const OVER: Duration = Duration::from_secs(10);
/// The server's TokenReview budget in this test (its defaults).
const QPS: f64 = 50.0;
const BURST: f64 = 100.0;

fn reviews(cluster: &KubeDouble) -> u64 {
    cluster
        .counters()
        .requests_for("create", "tokenreviews.authentication.k8s.io")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_tokens_cost_a_bounded_number_of_token_reviews() {
    let _heavy = crate::HEAVY.lock().await;
    let seed = crate::seed("token flood");
    let cluster = KubeDouble::start().await.expect("double");
    cluster.add_token("alice-token", TokenUser::new("alice", &["devs"]));
    cluster.set_access_rules(vec![
        AccessRule::allow()
            .user("alice")
            .api_group("storagemigration.k8s.io")
            .resource("storageversionmigrations"),
    ]);
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("cluster.kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig_yaml()).expect("kubeconfig");
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            &format!("--authentication-kubeconfig={}", kubeconfig.display()),
            &format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--authentication-skip-lookup",
            // A known token's answer outlives the flood, so it never has to compete with it.
            "--authentication-token-webhook-cache-ttl=1m",
        ],
    );
    let http = server
        .http_client_builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let url = format!("{}{SVMS}", server.url);
    let known = http
        .get(&url)
        .bearer_auth("alice-token")
        .send()
        .await
        .expect("alice");
    assert_eq!(known.status(), 200);
    let before = reviews(&cluster);
    assert_eq!(before, 1, "alice's token was reviewed once");

    // 10 000 random tokens, paced over 10 s, with alice asking all along.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tokens: Vec<String> = (0..RANDOM_TOKENS)
        .map(|_| format!("{:032x}", rng.random::<u128>()))
        .collect();
    let unauthorized = AtomicUsize::new(0);
    let throttled = AtomicUsize::new(0);
    let other = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    let flood = futures::stream::iter(tokens.into_iter().enumerate())
        .map(|(i, token)| {
            let (http, url) = (&http, &url);
            let (unauthorized, throttled, other) = (&unauthorized, &throttled, &other);
            async move {
                let due = started + OVER.mul_f64(i as f64 / RANDOM_TOKENS as f64);
                tokio::time::sleep_until(due.into()).await;
                let response = http
                    .get(url)
                    .bearer_auth(&token)
                    .send()
                    .await
                    .expect("request");
                let code = response.status().as_u16();
                let retry_after = response.headers().get("retry-after").cloned();
                let status: Value = response.json().await.expect("a Status body");
                match (code, status["reason"].as_str()) {
                    (401, Some("Unauthorized")) => {
                        unauthorized.fetch_add(1, Ordering::Relaxed);
                    }
                    (429, Some("TooManyRequests")) if retry_after.is_some() => {
                        throttled.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => other.lock().expect("lock").push(format!("{code} {status}")),
                }
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>();
    let alice = async {
        let mut answers = Vec::new();
        while started.elapsed() < OVER {
            let response = http
                .get(&url)
                .bearer_auth("alice-token")
                .send()
                .await
                .expect("alice");
            answers.push(response.status().as_u16());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        answers
    };
    let ((), alice) = tokio::join!(
        async {
            flood.await;
        },
        alice
    );
    let elapsed = started.elapsed().as_secs_f64();
    let flood_reviews = reviews(&cluster) - before;
    let (unauthorized, throttled) = (unauthorized.into_inner(), throttled.into_inner());
    println!(
        "{RANDOM_TOKENS} random tokens in {elapsed:.1}s: {flood_reviews} TokenReviews, {unauthorized} × 401, {throttled} × 429"
    );
    let other = other.into_inner().expect("lock");
    assert!(
        other.is_empty(),
        "unexpected answers: {:?}",
        &other[..other.len().min(5)]
    );
    assert_eq!(unauthorized + throttled, RANDOM_TOKENS);
    // Every reviewed token was refused by its review, and only those got a 401.
    assert_eq!(unauthorized as u64, flood_reviews);
    // The budget: a burst, then the rate, over the time the flood took.
    let bound = BURST + QPS * elapsed.ceil();
    assert!(
        (flood_reviews as f64) <= bound,
        "{flood_reviews} TokenReviews for {RANDOM_TOKENS} random tokens (bound {bound})"
    );
    assert!(flood_reviews > 0, "the flood was reviewed at all");
    assert!(
        alice.iter().all(|code| *code == 200),
        "a known token kept working: {alice:?}"
    );
    assert_eq!(
        reviews(&cluster) - before,
        flood_reviews,
        "alice was answered from the cache"
    );
}

//! Seeds for whatever a test draws at random: `SVM_TEST_SEED=<n>` replays a run; otherwise a
//! fresh seed, printed (cargo test shows a failed test's output).

/// The seed for `what`, printed with how to replay it.
pub fn seed(what: &str) -> u64 {
    let seed = std::env::var("SVM_TEST_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{what}: seed {seed} (replay with SVM_TEST_SEED={seed})");
    seed
}

//! The one way the tests wait for something to become true: poll until a check gives a value,
//! or fail with what the caller says it was waiting for and what it saw. The limit is a hang
//! guard, never a speed check (speed is what the benchmarks print).

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a check is tried again.
pub const POLL: Duration = Duration::from_millis(200);

/// Poll `check` (every [`POLL`]) until it gives `Some`; fail after `limit` with `what` and
/// `describe()`.
pub fn eventually<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    describe: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}\n{}",
            describe()
        );
        std::thread::sleep(POLL);
    }
}

/// [`eventually`] for an async check: `Ok` ends the wait, `Err` says what was seen last (and is
/// the failure's message once `limit` has passed).
pub async fn eventually_async<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "{what}: not within {limit:?}; last seen: {seen}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_that_comes_true_ends_the_wait() {
        let mut tries = 0;
        let value = eventually(
            Duration::from_secs(5),
            "the third try",
            || {
                tries += 1;
                (tries == 3).then_some(tries)
            },
            String::new,
        );
        assert_eq!(value, 3);
    }

    #[test]
    #[should_panic(expected = "never: not within")]
    fn a_check_that_never_comes_true_fails_with_what_was_awaited() {
        eventually(
            Duration::from_millis(10),
            "never",
            || None::<()>,
            String::new,
        );
    }

    #[tokio::test]
    async fn the_async_form_reports_the_last_thing_seen() {
        let mut tries = 0;
        let value = eventually_async(Duration::from_secs(5), "ok", || {
            tries += 1;
            let now = tries;
            async move {
                if now < 2 {
                    Err(format!("try {now}"))
                } else {
                    Ok(now)
                }
            }
        })
        .await;
        assert_eq!(value, 2);
    }
}

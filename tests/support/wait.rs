//! The one way the tests wait for something to become true: poll until a check gives a value,
//! or fail with what the caller says it was waiting for and what it saw. The limit is a hang
//! guard, never a speed check (speed is what the benchmarks print).
//!
//! [`eventually`] and [`eventually_async`] poll every [`POLL`]. Their `_every` forms take the
//! interval, for the few waits whose poll must stay finer: one that every test pays (a server's
//! start), one for a state a quick change can overtake, one for the moment a test acts at, or
//! a benchmark's timing read from the poll. [`eventually_async_every`] also takes a `describe`
//! run once, on failure, for what is too costly to gather at every try (a log, a scrape).

use std::time::{Duration, Instant};

/// How often a check is tried again.
pub const POLL: Duration = Duration::from_millis(200);

/// Poll `check` (every [`POLL`]) until it gives `Some`; fail after `limit` with `what` and
/// `describe()`.
pub fn eventually<T>(
    limit: Duration,
    what: &str,
    check: impl FnMut() -> Option<T>,
    describe: impl Fn() -> String,
) -> T {
    eventually_every(limit, POLL, what, check, describe)
}

/// [`eventually`], trying `check` again every `every` rather than every [`POLL`].
pub fn eventually_every<T>(
    limit: Duration,
    every: Duration,
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
        std::thread::sleep(every);
    }
}

/// [`eventually`] for an async check: `Ok` ends the wait, `Err` says what was seen last (and is
/// the failure's message once `limit` has passed).
pub async fn eventually_async<T>(
    limit: Duration,
    what: &str,
    check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    eventually_async_every(limit, POLL, what, check, async || String::new()).await
}

/// [`eventually_async`], trying `check` again every `every`; a failure's message is what was
/// seen last and then `describe()`, awaited only then.
pub async fn eventually_async_every<T>(
    limit: Duration,
    every: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, String>,
    describe: impl AsyncFn() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if Instant::now() >= deadline => {
                let more = describe().await;
                let more = if more.is_empty() {
                    more
                } else {
                    format!("\n{more}")
                };
                panic!("{what}: not within {limit:?}; last seen: {seen}{more}");
            }
            Err(_) => {}
        }
        tokio::time::sleep(every).await;
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

    #[test]
    fn the_interval_is_the_callers() {
        let started = Instant::now();
        let mut tries = 0;
        eventually_every(
            Duration::from_secs(5),
            Duration::from_millis(10),
            "the fifth try",
            || {
                tries += 1;
                (tries == 5).then_some(())
            },
            String::new,
        );
        // Four pauses of 10 ms, far below four of POLL.
        assert!(started.elapsed() < 2 * POLL, "{:?}", started.elapsed());
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

    #[tokio::test]
    async fn an_async_check_may_keep_what_it_saw() {
        let mut seen = Vec::new();
        let value = eventually_async_every(
            Duration::from_secs(5),
            Duration::from_millis(1),
            "three tries",
            async || {
                seen.push(seen.len());
                if seen.len() < 3 {
                    Err(format!("{seen:?}"))
                } else {
                    Ok(seen.len())
                }
            },
            async || unreachable!("described only on failure"),
        )
        .await;
        assert_eq!(value, 3);
        assert_eq!(seen, [0, 1, 2]);
    }

    #[tokio::test]
    #[should_panic(expected = "never: not within 10ms; last seen: try 2\nthe log")]
    async fn an_async_failure_says_what_was_seen_and_then_the_description() {
        // The first try is before the limit, the second (20 ms on) after it.
        let mut tries = 0;
        eventually_async_every(
            Duration::from_millis(10),
            Duration::from_millis(20),
            "never",
            async || -> Result<(), String> {
                tries += 1;
                Err(format!("try {tries}"))
            },
            async || "the log".to_string(),
        )
        .await;
    }
}

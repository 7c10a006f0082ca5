//! The one way the tests wait for something to become true: poll until a check gives a value,
//! or fail with what the caller says it was waiting for and what it saw last.
//!
//! A wait fails when **nothing moves**, not on a total: the `limit` each caller gives is how
//! long what the wait sees may stay the same. A slow or loaded machine makes a wait longer,
//! never red, as long as what it awaits keeps moving (a migration's counts, a pod's phase, a
//! log growing); a wait whose view keeps changing but never comes true still ends, at
//! [`CAP_STALLS`] limits in all. The limit is a hang guard, never a speed check (speed is what
//! the benchmarks print).
//!
//! What a wait sees: for [`eventually_async`] the `Err` its check gives (free, compared at
//! every try); for [`eventually`] what `describe` says, asked every [`OBSERVE`] (it may run
//! kubectl, so not at every try), or for [`eventually_watching`] what its `watch` says. A
//! wait that sees nothing (`describe` empty) fails at its limit, as a plain deadline does.
//!
//! [`eventually`] and [`eventually_async`] poll every [`POLL`]. Their `_every` forms take the
//! interval, for the few waits whose poll must stay finer: one that every test pays (a server's
//! start), one for a state a quick change can overtake, one for the moment a test acts at, or
//! a benchmark's timing read from the poll. [`eventually_async_every`] also takes a `describe`
//! run once, on failure, for what is too costly to gather at every try (a log, a scrape).

use std::time::{Duration, Instant};

/// How often a check is tried again.
pub const POLL: Duration = Duration::from_millis(200);

/// How often a synchronous wait asks what it sees (at most: a limit under four times this is
/// watched four times within it).
pub const OBSERVE: Duration = Duration::from_secs(5);

/// However much it keeps changing, a wait ends after this many of its limits.
pub const CAP_STALLS: u32 = 4;

/// Poll `check` (every [`POLL`]) until it gives `Some`; fail once `describe()` has said the
/// same for `limit` (or after [`CAP_STALLS`] limits), with `what` and what it said last.
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
    check: impl FnMut() -> Option<T>,
    describe: impl Fn() -> String,
) -> T {
    poll(limit, every, what, check, &describe, &describe)
}

/// [`eventually`] where what tells progress (`watch`, asked every [`OBSERVE`]) is not what a
/// failure prints (`describe`): a description with times, ages or a log changes at every look
/// whether anything moved or not.
pub fn eventually_watching<T>(
    limit: Duration,
    what: &str,
    check: impl FnMut() -> Option<T>,
    watch: impl Fn() -> String,
    describe: impl Fn() -> String,
) -> T {
    poll(limit, POLL, what, check, watch, describe)
}

fn poll<T>(
    limit: Duration,
    every: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    watch: impl Fn() -> String,
    describe: impl Fn() -> String,
) -> T {
    let mut progress = Progress::new(limit);
    let watch_every = OBSERVE.min(limit / 4);
    let mut watched = Instant::now();
    progress.saw(watch());
    loop {
        if let Some(value) = check() {
            return value;
        }
        if watched.elapsed() >= watch_every {
            watched = Instant::now();
            progress.saw(watch());
        }
        if let Some(why) = progress.ended() {
            panic!("{what}: {why}\n{}", describe());
        }
        std::thread::sleep(every);
    }
}

/// [`eventually`] for an async check: `Ok` ends the wait, `Err` says what was seen (a change
/// in it is progress; the last one is the failure's message once the wait ends).
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
    let mut progress = Progress::new(limit);
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) => {
                progress.saw(seen);
                if let Some(why) = progress.ended() {
                    let more = describe().await;
                    let more = if more.is_empty() {
                        more
                    } else {
                        format!("\n{more}")
                    };
                    let seen = progress.seen.unwrap_or_default();
                    panic!("{what}: {why}; last seen: {seen}{more}");
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// What a wait has seen and since when it has seen it.
struct Progress {
    stall: Duration,
    started: Instant,
    changed: Instant,
    seen: Option<String>,
}

impl Progress {
    fn new(stall: Duration) -> Self {
        let now = Instant::now();
        Progress {
            stall,
            started: now,
            changed: now,
            seen: None,
        }
    }

    /// What the wait sees now: anything other than last time is progress.
    fn saw(&mut self, seen: String) {
        if self.seen.as_ref() != Some(&seen) {
            self.seen = Some(seen);
            self.changed = Instant::now();
        }
    }

    /// Why the wait ends now, if it does: nothing changed for a whole limit, or the cap.
    fn ended(&self) -> Option<String> {
        let limit = self.stall;
        let total = self.started.elapsed();
        if self.changed.elapsed() >= limit {
            Some(format!(
                "not within {limit:?} of no change ({:.1} s in all)",
                total.as_secs_f64()
            ))
        } else if total >= limit * CAP_STALLS {
            Some(format!(
                "not within {CAP_STALLS} × {limit:?}, though what it saw kept changing"
            ))
        } else {
            None
        }
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
    async fn an_async_wait_that_sees_nothing_change_fails_at_its_limit_saying_what_it_saw() {
        let failed = tokio::spawn(eventually_async_every(
            Duration::from_millis(10),
            Duration::from_millis(2),
            "never",
            async || -> Result<(), String> { Err("the same".to_string()) },
            async || "the log".to_string(),
        ))
        .await
        .expect_err("the wait fails");
        let message = *failed
            .into_panic()
            .downcast::<String>()
            .expect("a formatted panic message");
        assert!(
            message.starts_with("never: not within 10ms of no change ("),
            "{message}"
        );
        assert!(
            message.ends_with("; last seen: the same\nthe log"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn an_async_wait_that_sees_progress_outlasts_its_limit() {
        let limit = Duration::from_millis(200);
        let started = Instant::now();
        let mut tries = 0;
        let value = eventually_async_every(
            limit,
            Duration::from_millis(10),
            "the thirtieth try",
            async || {
                tries += 1;
                if tries < 30 {
                    Err(format!("try {tries}"))
                } else {
                    Ok(tries)
                }
            },
            async || String::new(),
        )
        .await;
        assert_eq!(value, 30);
        // Twenty-nine pauses of 10 ms: past the limit, never a limit without a change.
        assert!(started.elapsed() > limit, "{:?}", started.elapsed());
    }

    #[tokio::test]
    #[should_panic(expected = "though what it saw kept changing; last seen: try")]
    async fn a_wait_that_keeps_changing_but_never_comes_true_ends_at_the_cap() {
        let mut tries = 0;
        eventually_async_every(
            Duration::from_millis(20),
            Duration::from_millis(2),
            "never",
            async || -> Result<(), String> {
                tries += 1;
                Err(format!("try {tries}"))
            },
            async || String::new(),
        )
        .await;
    }

    #[test]
    fn a_synchronous_wait_watches_what_describe_says() {
        let limit = Duration::from_millis(200);
        let started = Instant::now();
        let said = std::cell::Cell::new(0);
        let mut tries = 0;
        eventually_every(
            limit,
            Duration::from_millis(5),
            "the sixtieth try",
            || {
                tries += 1;
                (tries == 60).then_some(())
            },
            || {
                said.set(said.get() + 1);
                format!("described {} times", said.get())
            },
        );
        // Sixty tries 5 ms apart outlast the limit: what describe said kept changing.
        assert!(started.elapsed() > limit, "{:?}", started.elapsed());
        assert!(said.get() > 2, "described {} times", said.get());
    }

    #[test]
    #[should_panic(expected = "never: not within 40ms of no change")]
    fn a_synchronous_wait_whose_description_stays_the_same_fails_at_its_limit() {
        eventually_every(
            Duration::from_millis(40),
            Duration::from_millis(5),
            "never",
            || None::<()>,
            || "the same".to_string(),
        );
    }

    #[test]
    #[should_panic(expected = "never: not within 40ms of no change (")]
    fn a_watching_wait_is_judged_by_its_watch_not_by_its_description() {
        // The description changes at every look (as a log or kubectl's AGE column would); the
        // watch does not: the wait fails at its limit, printing the description.
        let looks = std::cell::Cell::new(0);
        eventually_watching(
            Duration::from_millis(40),
            "never",
            || None::<()>,
            || "the same".to_string(),
            || {
                looks.set(looks.get() + 1);
                format!("look {}", looks.get())
            },
        );
    }
}

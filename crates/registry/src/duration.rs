//! Go's duration syntax (`time.ParseDuration`), the one parser of the workspace: every
//! command-line flag (`10s`, `1m30s`, `1.5h`, `250ms`, `0`, as kube-apiserver's and
//! kube-controller-manager's flags are written, so a value copied from a Kubernetes manifest
//! means the same here), a VolumeClaimMigration's `spec.maxWaitTime`, and the `?timeout=`
//! query parameter, whose 400 quotes Go's error text as kube-apiserver's does.
//!
//! Hand-written, not a crate's: none parses Go's syntax exactly and safely. `humantime` has a
//! syntax of its own (`1m 30s`, no fractions of a unit); `kube::core::Duration` (used here
//! before) reads `1.5h` through a float, accepts `+-5s` and `""`, has no Go error texts, and
//! panics on a value past `std::time::Duration`'s range (`99999999999999999999h`: a client's
//! object could reach it); `go-parse-duration` (0.1, unchanged since 2021) panics on a
//! non-ASCII unit and words its errors differently. This one follows Go's `ParseDuration`
//! step by step, in integers, and its tests hold it to Go's answers.

use std::time::Duration;

/// A duration Go's `time.ParseDuration` refuses, worded as Go words it (kube-apiserver puts
/// that text into its answers), or a negative one where only a length of time makes sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a duration: no number where one must be, or past Go's ±292 years.
    #[error("time: invalid duration {}", go_quote(.0))]
    Invalid(String),
    /// A number without its unit (`10`).
    #[error("time: missing unit in duration {}", go_quote(.0))]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("time: unknown unit {} in duration {}", go_quote(.unit), go_quote(.text))]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole duration as written.
        text: String,
    },
    /// A valid Go duration below zero, where a length of time is asked for.
    #[error("invalid duration {0:?}: must not be negative")]
    Negative(String),
}

/// A length of time in Go's syntax (flags, `spec.maxWaitTime`): negative durations are
/// refused. Surrounding whitespace is forgiven, as it was before this parser (an object stored
/// with it stays valid on its next update).
pub fn go_duration(text: &str) -> Result<Duration, DurationError> {
    let nanos = parse_go_duration(text.trim())?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| DurationError::Negative(text.to_string()))
}

/// Go's `time.ParseDuration`, in (signed) nanoseconds, with its error texts:
/// `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, units ns, us (µs, μs), ms, s, m, h; at most ±2⁶³ ns.
pub fn parse_go_duration(text: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (value, after) = component(rest, text)?;
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > 1 << 63 {
            return Err(invalid());
        }
        rest = after;
    }
    match (negative, i64::try_from(total)) {
        (false, Ok(nanos)) => Ok(nanos),
        (true, Ok(nanos)) => Ok(-nanos),
        // -2⁶³ ns is Go's smallest duration; +2⁶³ is one past its largest.
        (true, Err(_)) => Ok(i64::MIN),
        (false, Err(_)) => Err(invalid()),
    }
}

/// The first `[0-9]*(\.[0-9]*)?unit` of `rest` (a part of `text`, named in errors): its
/// nanoseconds, and what follows it.
fn component<'a>(rest: &'a str, text: &str) -> Result<(u128, &'a str), DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    let is_number = |c: char| c == '.' || c.is_ascii_digit();
    if !rest.starts_with(is_number) {
        return Err(invalid());
    }
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (whole, after) = rest.split_at(digits);
    let (fraction, after) = match after.strip_prefix('.') {
        Some(after) => {
            let end = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            (Some(&after[..end]), &after[end..])
        }
        None => (None, after),
    };
    if whole.is_empty() && fraction.is_none_or(str::is_empty) {
        return Err(invalid());
    }
    let unit_len = after.find(is_number).unwrap_or(after.len());
    if unit_len == 0 {
        return Err(DurationError::MissingUnit(text.to_string()));
    }
    let (unit, after) = after.split_at(unit_len);
    let scale = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
        unit: unit.to_string(),
        text: text.to_string(),
    })?;
    // More digits than u128 holds are past 2⁶³ ns whatever the unit: invalid, as in Go.
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| invalid())?
    };
    let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
    if let Some(fraction) = fraction.filter(|f| !f.is_empty()) {
        // Digits past nanosecond precision change nothing (Go stops reading them too); 25 of
        // them times an hour's nanoseconds (3.6·10¹²) stay within u128, 30 would not.
        let kept = &fraction[..fraction.len().min(25)];
        let numerator: u128 = kept.parse().map_err(|_| invalid())?;
        value += numerator * scale / 10u128.pow(kept.len() as u32);
    }
    Ok((value, after))
}

/// Nanoseconds in one of Go's duration units.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Go's `time.quote`: double quotes, `"` and `\` escaped, bytes of anything outside printable
/// ASCII as `\xNN`.
fn go_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        if c.is_ascii() && !c.is_ascii_control() {
            if c == '"' || c == '\\' {
                quoted.push('\\');
            }
            quoted.push(c);
        } else {
            let mut buf = [0u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                quoted.push_str(&format!("\\x{byte:02x}"));
            }
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_go_durations() {
        assert_eq!(go_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(go_duration(" 60s "), Ok(Duration::from_secs(60)));
        for bad in [
            "",
            "s",
            "5",
            "10x",
            "-5s",
            "1..2s",
            "1h-",
            "5 minutes",
            "+-5s",
            "1e3s",
        ] {
            assert!(go_duration(bad).is_err(), "{bad:?} must be refused");
        }
        assert_eq!(
            go_duration("-5s"),
            Err(DurationError::Negative("-5s".into()))
        );
    }

    #[test]
    fn a_duration_past_gos_range_is_refused_not_a_panic() {
        // kube::core::Duration, used before, panicked on the first (a float past Duration's
        // range); a VolumeClaimMigration's spec.maxWaitTime is a client's text.
        for huge in ["99999999999999999999h", "3000000h", "9223372036854775808ns"] {
            assert!(go_duration(huge).is_err(), "{huge:?}");
        }
        let digits = format!("{}s", "9".repeat(200));
        assert_eq!(
            parse_go_duration(&digits),
            Err(DurationError::Invalid(digits.clone()))
        );
        // Go's extremes: the largest duration and the smallest one.
        assert_eq!(parse_go_duration("9223372036854775807ns"), Ok(i64::MAX));
        assert_eq!(parse_go_duration("-9223372036854775808ns"), Ok(i64::MIN));
    }

    #[test]
    fn go_durations_and_their_errors() {
        assert_eq!(parse_go_duration("10s"), Ok(10_000_000_000));
        assert_eq!(parse_go_duration("1m30s"), Ok(90_000_000_000));
        assert_eq!(parse_go_duration("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration(".5s"), Ok(500_000_000));
        assert_eq!(parse_go_duration("1.s"), Ok(1_000_000_000));
        assert_eq!(parse_go_duration("1ns"), Ok(1));
        assert_eq!(parse_go_duration("2µs"), Ok(2_000));
        assert_eq!(parse_go_duration("2μs"), Ok(2_000));
        assert_eq!(parse_go_duration("2us"), Ok(2_000));
        assert_eq!(parse_go_duration("-1s"), Ok(-1_000_000_000));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert_eq!(parse_go_duration("+0"), Ok(0));
        assert_eq!(parse_go_duration("-0"), Ok(0));
        // Fractions are exact (no float): 1.1 hours is 3960 s to the nanosecond.
        assert_eq!(parse_go_duration("1.1h"), Ok(3_960_000_000_000));
        assert_eq!(parse_go_duration("0.0000000015s"), Ok(1));
        // Past nanosecond precision a fraction is cut, never an overflow (a client's ?timeout=).
        let long_fraction = format!("0.{}h", "9".repeat(40));
        assert_eq!(parse_go_duration(&long_fraction), Ok(3_599_999_999_999));
        let message = |text: &str| parse_go_duration(text).map_err(|e| e.to_string());
        // The texts kube-apiserver v1.36.2 answered for `?timeout=abc` and `?timeout=10`.
        assert_eq!(message("abc"), Err("time: invalid duration \"abc\"".into()));
        assert_eq!(
            message("10"),
            Err("time: missing unit in duration \"10\"".into())
        );
        assert_eq!(
            message("10x"),
            Err("time: unknown unit \"x\" in duration \"10x\"".into())
        );
        assert_eq!(message(""), Err("time: invalid duration \"\"".into()));
        assert_eq!(message("."), Err("time: invalid duration \".\"".into()));
        assert_eq!(
            message("3000000h"),
            Err("time: invalid duration \"3000000h\"".into())
        );
        assert_eq!(
            message("1é"),
            Err("time: unknown unit \"\\xc3\\xa9\" in duration \"1\\xc3\\xa9\"".into())
        );
        assert_eq!(
            message("1\"s"),
            Err("time: unknown unit \"\\\"s\" in duration \"1\\\"s\"".into())
        );
    }
}

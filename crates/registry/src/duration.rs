//! What every command-line flag shares: one duration syntax, Go's, as kube-apiserver's and
//! kube-controller-manager's flags are written (`10s`, `1m30s`, `1.5h`, `250ms`, `0`), so a
//! value copied from a Kubernetes manifest means the same here.

use std::time::Duration;

/// A flag duration in Go's syntax (`time.ParseDuration`, parsed by `kube::core::Duration`);
/// negative durations are refused.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    // kube::core::Duration reads "" as zero; Go's time.ParseDuration refuses it, and so do we.
    if text.trim().is_empty() {
        return Err("invalid duration \"\": examples: 30s, 1m30s, 250ms".into());
    }
    let parsed: kube::core::Duration = text
        .trim()
        .parse()
        .map_err(|err| format!("invalid duration {text:?} ({err}); examples: 30s, 1m30s, 250ms"))?;
    if parsed.is_negative() {
        return Err(format!("invalid duration {text:?}: must not be negative"));
    }
    Ok(parsed.into())
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
        for bad in ["", "s", "5", "10x", "-5s", "1..2s", "1h-", "5 minutes"] {
            assert!(go_duration(bad).is_err(), "{bad:?} must be refused");
        }
    }
}

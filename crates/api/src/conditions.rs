//! metav1.Conditions on the project's kinds (VolumeClaimMigration, DataPlaneRollout), kept as
//! upstream's `meta.SetStatusCondition` keeps them: one per type, `lastTransitionTime` moved
//! only when the status turns.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets condition `type_` to `on` with `reason` and `message`, observed at `generation`.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    on: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let status = if on { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.status = status.into();
                existing.last_transition_time = Time(now);
            }
            existing.reason = reason.into();
            existing.message = message.into();
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_when_the_status_turns() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            "Running",
            true,
            "Resizing",
            "a",
            Some(1),
            t0,
        );
        set(
            &mut conditions,
            "Running",
            true,
            "Resizing",
            "b",
            Some(2),
            t1,
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(t0));
        assert_eq!(
            (
                conditions[0].message.as_str(),
                conditions[0].observed_generation
            ),
            ("b", Some(2))
        );
        set(
            &mut conditions,
            "Running",
            false,
            "Blocked",
            "c",
            Some(2),
            t1,
        );
        assert_eq!(conditions[0].last_transition_time, Time(t1));
        assert_eq!(conditions[0].status, "False");
    }
}

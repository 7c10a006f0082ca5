//! The columns every kind's table shares (Name first, Age last) and the Age cell, as
//! kube-apiserver writes them for built-ins.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use svm_registry::TableColumn;

/// The Name column every table starts with (kube-apiserver's text).
pub(crate) fn name_column() -> TableColumn {
    TableColumn {
        name: "Name",
        type_: "string",
        format: "name",
        description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        priority: 0,
    }
}

/// The Age column every table ends with: a `string` cell like `4m43s`, as built-ins have it
/// (recording 07).
pub(crate) fn age_column() -> TableColumn {
    TableColumn {
        name: "Age",
        type_: "string",
        format: "",
        description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
        priority: 0,
    }
}

/// The Age cell: time since `created`, in kubectl's short form (`4m43s`, `3h`, `12d`), as
/// kube-apiserver's table convertors write it (apimachinery's `HumanDuration`).
pub(crate) fn age(created: Option<&Time>) -> String {
    let Some(created) = created else {
        return "<unknown>".to_string();
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let seconds = now.as_second() - created.0.as_second();
    human_duration(seconds)
}

/// apimachinery `duration.HumanDuration` for whole seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    let s = seconds.max(0);
    let minutes = s / 60;
    let hours = s / 3600;
    let days = hours / 24;
    let years = days / 365;
    let with = |major: i64, unit: &str, minor: i64, minor_unit: &str| {
        if minor == 0 {
            format!("{major}{unit}")
        } else {
            format!("{major}{unit}{minor}{minor_unit}")
        }
    };
    if s < 120 {
        format!("{s}s")
    } else if minutes < 10 {
        with(minutes, "m", s % 60, "s")
    } else if hours < 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        with(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        with(days, "d", hours % 24, "h")
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        with(years, "y", days % 365, "d")
    } else {
        format!("{years}y")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_kubectl() {
        for (seconds, want) in [
            (-5, "<invalid>"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (283, "4m43s"),
            (300, "5m"),
            (1800, "30m"),
            (3 * 3600 + 60, "3h1m"),
            (5 * 3600, "5h"),
            (30 * 3600, "30h"),
            (3 * 86400 + 7200, "3d2h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (10 * 365 * 86400, "10y"),
        ] {
            assert_eq!(human_duration(seconds), want, "{seconds}s");
        }
    }
}

//! The time as the API writes it: to the second, as metav1.Time's JSON form keeps it.

/// The current time as metav1.Time, to the second (what its JSON form keeps).
pub fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    let seconds = k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(seconds)
}

/// The current time in RFC 3339, to the second (`2026-11-23T22:38:02Z`), as records carry it.
pub fn now_text() -> String {
    now().0.to_string()
}

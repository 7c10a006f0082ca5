//! `svm_api_mode{mode}`: 1 for the mode the controllers run in (`owner`, `companion`), or for
//! why none runs (`waiting`, `refused`); 0 for the others.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Decision;

/// The API mode a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    /// `owner`, `companion` or `waiting`.
    pub mode: String,
}

/// The API mode's series (`svm_api_mode`).
#[derive(Clone, Default)]
pub struct ApiModeMetrics {
    /// 1 for the mode this replica is in, else 0.
    pub mode: Family<ModeLabel, Gauge>,
}

impl ApiModeMetrics {
    /// Registers the series in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "svm_api_mode",
            "The API mode the controllers run in (owner, companion), or why none runs (waiting, refused)",
            self.mode.clone(),
        );
    }

    /// Marks `decision`'s mode as this replica's, and no other.
    pub fn set(&self, decision: &Decision) {
        for mode in ["owner", "companion", "waiting", "refused"] {
            self.mode
                .get_or_create(&ModeLabel { mode: mode.into() })
                .set(i64::from(mode == decision.label()));
        }
    }
}

//! `svm_api_mode{mode}`: 1 for the mode the controllers run in (`owner`, `companion`), or for
//! why none runs (`waiting`, `refused`); 0 for the others.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModeLabel {
    pub mode: String,
}

#[derive(Clone, Default)]
pub(crate) struct ApiModeMetrics {
    pub mode: Family<ModeLabel, Gauge>,
}

impl ApiModeMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "svm_api_mode",
            "The API mode the controllers run in (owner, companion), or why none runs (waiting, refused)",
            self.mode.clone(),
        );
    }

    pub(crate) fn set(&self, decision: &Decision) {
        for mode in ["owner", "companion", "waiting", "refused"] {
            self.mode
                .get_or_create(&ModeLabel { mode: mode.into() })
                .set(i64::from(mode == decision.label()));
        }
    }
}

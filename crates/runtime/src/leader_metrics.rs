//! Leadership metrics (`svm_leader_*`): which replica runs the controllers, and how often
//! leadership moves (a flapping leader restarts the trigger and every migration each time).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The leadership series (`svm_leader_*`).
#[derive(Debug, Clone, Default)]
pub struct LeaderMetrics {
    /// 1 while this replica runs the controllers, else 0.
    pub is_leader: Gauge,
    /// Leadership terms this replica has started.
    pub terms: Counter,
}

impl LeaderMetrics {
    /// Registers both series in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "svm_leader_is_leader",
            "1 while this replica holds the leader record and runs the controllers, else 0",
            self.is_leader.clone(),
        );
        registry.register(
            "svm_leader_terms",
            "Leadership terms this replica has started",
            self.terms.clone(),
        );
    }

    /// Marks a term as running until the returned guard drops (however the term ends).
    pub fn term(&self) -> TermGuard {
        self.terms.inc();
        self.is_leader.set(1);
        TermGuard {
            is_leader: self.is_leader.clone(),
        }
    }
}

/// While it lives, this replica counts as the leader ([`LeaderMetrics::term`]).
pub struct TermGuard {
    is_leader: Gauge,
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        self.is_leader.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_sets_the_gauge_until_it_ends() {
        let metrics = LeaderMetrics::default();
        {
            let _term = metrics.term();
            assert_eq!(metrics.is_leader.get(), 1);
        }
        assert_eq!(metrics.is_leader.get(), 0);
        let _again = metrics.term();
        assert_eq!(metrics.terms.get(), 2);
    }
}

//! Which part of `storagemigration.k8s.io` this server plays on a cluster (`--api-mode`).
//!
//! Kubernetes 1.37 serves `storagemigration.k8s.io/v1` itself, on by default (1.30–1.36 behind
//! the `StorageVersionMigrator` gate), and kube-controller-manager runs its own migrator. What
//! the cluster does not have is what this server adds: StorageStates, the hash history and the
//! trigger. So:
//!
//! - **owner** (where the cluster does not serve the group): this server serves the group
//!   (its APIServices, `apiservice/`) and runs the trigger and the migrator on its own store —
//!   and never runs over a local APIService of the group.
//! - **companion** (where it does): nothing of the group is registered; the trigger creates its
//!   migrations on the cluster's built-in API and follows their status (kube-controller-manager
//!   runs them, or our migrator does with `--companion-migrator=svm-apiserver`); StorageStates
//!   are served in the project group `storage.svm-apiserver.io`.
//! - **auto** (the default): companion when the cluster serves the group itself, else owner.
//!
//! The decision is taken at start and again whenever the group's APIServices change (a watch;
//! see [`detect`]): a cluster upgraded under a running server is noticed at once.

pub mod carry;
mod detect;
pub mod metrics;
mod watch;

use std::fmt;

pub use detect::{GroupServing, detect};
pub use watch::watch;

use svm_api::GROUP;

/// Where the documentation of the modes and the upgrade path lives.
pub use svm_runtime::API_MODES_DOCS as DOCS;

/// `--api-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiMode {
    /// Companion where the cluster serves the group itself, else owner.
    #[default]
    Auto,
    /// Serve `storagemigration.k8s.io` (refused where the cluster serves it).
    Owner,
    /// Leave the group to the cluster; add StorageStates and the trigger.
    Companion,
}

/// `--companion-migrator`: who runs the built-in migrations in companion mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CompanionMigrator {
    /// kube-controller-manager's storage-version-migrator-controller (the cluster's own).
    #[default]
    KubeControllerManager,
    /// This server's migrator, for clusters that run kube-controller-manager with that
    /// controller switched off (`--controllers=*,-storage-version-migrator-controller`).
    SvmApiserver,
}

/// What the controllers do, given the flag and the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Trigger and migrator on this server's own store.
    Owner,
    /// The trigger's migrations are the cluster's, in `version` (its preferred built-in one).
    Companion {
        /// The cluster's preferred storagemigration.k8s.io version.
        version: String,
    },
    /// `--api-mode=companion` on a cluster that does not serve the group (yet): no
    /// controller runs until it does.
    Waiting {
        /// Why, for people.
        reason: String,
    },
    /// `--api-mode=owner` on a cluster that serves the group itself: no controller runs.
    Refused {
        /// Why, for people (naming the flag and the docs).
        reason: String,
    },
}

impl Decision {
    /// The label of `svm_api_mode`.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Owner => "owner",
            Decision::Companion { .. } => "companion",
            Decision::Waiting { .. } => "waiting",
            Decision::Refused { .. } => "refused",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Owner => write!(f, "owner mode: this server serves {GROUP}"),
            Decision::Companion { version } => write!(
                f,
                "companion mode: the cluster serves {GROUP}/{version} itself; the trigger's \
                 migrations are created there"
            ),
            Decision::Waiting { reason } | Decision::Refused { reason } => f.write_str(reason),
        }
    }
}

fn versions(list: &[String]) -> String {
    list.join(", ")
}

/// Decides what to do on a cluster that serves the group as `serving` says.
pub fn decide(mode: ApiMode, serving: &GroupServing) -> Decision {
    let taken_over: Vec<String> = serving
        .delegated
        .iter()
        .filter(|d| d.taken_over)
        .map(|d| d.version.clone())
        .collect();
    if !taken_over.is_empty() {
        // Neither mode can work: the cluster's own versions are routed to a Service.
        let names: Vec<String> = taken_over.iter().map(|v| format!("{v}.{GROUP}")).collect();
        let reason = format!(
            "APIService {} is kube-apiserver's own (automanaged) but was pointed at a Service \
             (an apply of deploy/ over it): the cluster serves {GROUP} {} itself. Install \
             deploy/companion and delete {} (kube-apiserver answers for itself again at once \
             and re-registers its APIService on its next start); see {DOCS}",
            names.join(", "),
            versions(&taken_over),
            names.join(", "),
        );
        return match mode {
            ApiMode::Owner => Decision::Refused {
                reason: format!("--api-mode=owner refuses to run: {reason}"),
            },
            ApiMode::Auto | ApiMode::Companion => Decision::Waiting { reason },
        };
    }
    let builtin = serving.preferred_builtin();
    match (mode, builtin) {
        (ApiMode::Owner, Some(_)) => Decision::Refused {
            reason: format!(
                "--api-mode=owner refuses to run: kube-apiserver serves {GROUP} {} itself \
                 (a local APIService). Registering this server's APIServices over the \
                 cluster's would shadow its API and race kube-controller-manager's migrator. \
                 Run with --api-mode=companion (or auto) and install deploy/companion; see {DOCS}",
                versions(&serving.builtin)
            ),
        },
        (ApiMode::Owner, None) | (ApiMode::Auto, None) => Decision::Owner,
        (ApiMode::Auto | ApiMode::Companion, Some(version)) => Decision::Companion {
            version: version.to_string(),
        },
        (ApiMode::Companion, None) => Decision::Waiting {
            reason: format!(
                "--api-mode=companion: the cluster does not serve {GROUP} itself (yet); no \
                 controller runs until it does (kube-apiserver registers its APIServices on \
                 its next start after ours are deleted; see {DOCS})"
            ),
        },
    }
}

/// What is wrong with the group's registration for `decision`, each a sentence for the log.
pub fn warnings(decision: &Decision, serving: &GroupServing) -> Vec<String> {
    let mut out = Vec::new();
    match decision {
        Decision::Companion { .. } | Decision::Waiting { .. } => {
            for delegated in serving.delegated.iter().filter(|d| !d.taken_over) {
                out.push(format!(
                    "APIService {}.{GROUP} still sends {GROUP}/{} to {}{}: in companion mode \
                     nothing of {GROUP} is served by svm-apiserver; delete it (kubectl delete \
                     apiservice {}.{GROUP}) — see {DOCS}",
                    delegated.version,
                    delegated.version,
                    delegated.service,
                    if delegated.ours { "" } else { " (not ours)" },
                    delegated.version,
                ));
            }
        }
        Decision::Owner => {
            for delegated in serving.delegated.iter().filter(|d| !d.ours) {
                out.push(format!(
                    "APIService {}.{GROUP} sends {GROUP}/{} to {}, which is not svm-apiserver",
                    delegated.version, delegated.version, delegated.service
                ));
            }
        }
        Decision::Refused { .. } => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::detect::Delegated;
    use super::*;

    fn serving(builtin: &[&str], ours: &[&str]) -> GroupServing {
        GroupServing {
            builtin: builtin.iter().map(|s| s.to_string()).collect(),
            delegated: ours
                .iter()
                .map(|v| Delegated {
                    version: v.to_string(),
                    service: "svm-system/svm-apiserver".into(),
                    ours: true,
                    taken_over: false,
                })
                .collect(),
        }
    }

    #[test]
    fn auto_is_companion_exactly_where_the_cluster_serves_the_group() {
        assert_eq!(
            decide(ApiMode::Auto, &serving(&["v1", "v1beta1"], &[])),
            Decision::Companion {
                version: "v1".into()
            }
        );
        assert_eq!(
            decide(ApiMode::Auto, &serving(&[], &["v1", "v1beta1", "v1alpha1"])),
            Decision::Owner
        );
        assert_eq!(
            decide(ApiMode::Auto, &GroupServing::default()),
            Decision::Owner
        );
    }

    #[test]
    fn owner_refuses_a_local_apiservice_naming_the_flag_and_the_docs() {
        let decision = decide(ApiMode::Owner, &serving(&["v1beta1"], &["v1", "v1alpha1"]));
        let Decision::Refused { reason } = &decision else {
            panic!("{decision:?}")
        };
        assert!(reason.contains("--api-mode"), "{reason}");
        assert!(reason.contains(DOCS), "{reason}");
        assert!(reason.contains("v1beta1"), "{reason}");
        assert_eq!(decision.label(), "refused");
        assert_eq!(
            decide(ApiMode::Owner, &serving(&[], &["v1"])),
            Decision::Owner
        );
    }

    #[test]
    fn a_taken_over_apiservice_stops_every_mode() {
        let mut hijacked = serving(&[], &["v1", "v1beta1"]);
        hijacked.delegated[1].taken_over = true;
        for mode in [ApiMode::Auto, ApiMode::Companion] {
            let decision = decide(mode, &hijacked);
            let Decision::Waiting { reason } = &decision else {
                panic!("{decision:?}")
            };
            assert!(
                reason.contains("v1beta1.storagemigration.k8s.io"),
                "{reason}"
            );
        }
        assert!(matches!(
            decide(ApiMode::Owner, &hijacked),
            Decision::Refused { .. }
        ));
    }

    #[test]
    fn companion_waits_for_the_cluster_and_warns_of_our_leftovers() {
        let decision = decide(ApiMode::Companion, &serving(&[], &["v1alpha1"]));
        assert!(matches!(decision, Decision::Waiting { .. }), "{decision:?}");
        let warned = warnings(&decision, &serving(&[], &["v1alpha1"]));
        assert_eq!(warned.len(), 1);
        assert!(warned[0].contains("kubectl delete apiservice v1alpha1.storagemigration.k8s.io"));
        let split = serving(&["v1beta1"], &["v1alpha1"]);
        let decision = decide(ApiMode::Companion, &split);
        assert_eq!(
            decision,
            Decision::Companion {
                version: "v1beta1".into()
            }
        );
        assert_eq!(warnings(&decision, &split).len(), 1);
        assert!(warnings(&Decision::Owner, &serving(&[], &["v1"])).is_empty());
    }
}

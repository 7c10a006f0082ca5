//! A trial's faults, drawn from its seed: how many etcd members it runs, which faults, in what
//! order, at what share of the migration done, for how long.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fault {
    /// SIGKILL the leader; start it again after the pause.
    KillLeader { down: Duration },
    /// SIGSTOP the leader past its lease (another replica takes over), then SIGCONT.
    PauseLeader { past_lease: Duration },
    /// SIGKILL etcd; start it again (same data, same ports) after the pause.
    RestartEtcd { down: Duration },
    /// Three members: SIGKILL one — the raft leader, or a follower the leading replica holds a
    /// connection to — and start it again (same data, same ports) after the pause.
    KillMember { member: Member, down: Duration },
    /// 10 % of PATCHes fail with 503 and of LISTs with 500, for a while.
    ServerErrors { lasting: Duration },
    /// 10 % of PATCHes and LISTs get 429 with Retry-After: 1, for a while.
    Throttling { lasting: Duration },
    /// The next watch-list stream of `resource` ends after `after` events, before its bookmark.
    CutStream {
        resource: &'static str,
        after: usize,
    },
}

/// Which etcd member a [`Fault::KillMember`] kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    /// The raft leader.
    Leader,
    /// A follower the leading replica's etcd client is connected to.
    Connected,
}

impl Fault {
    pub(crate) fn label(&self) -> String {
        let secs = |d: &Duration| format!("{:.1}s", d.as_secs_f64());
        match self {
            Fault::KillLeader { down } => format!("kill-9 leader ({} down)", secs(down)),
            Fault::PauseLeader { past_lease } => {
                format!("SIGSTOP leader (lease+{})", secs(past_lease))
            }
            Fault::RestartEtcd { down } => format!("etcd kill+restart ({} down)", secs(down)),
            Fault::KillMember { member, down } => {
                let which = match member {
                    Member::Leader => "leader",
                    Member::Connected => "connected follower",
                };
                format!("kill etcd {which} ({} down)", secs(down))
            }
            Fault::ServerErrors { lasting } => format!("10% 5xx ({})", secs(lasting)),
            Fault::Throttling { lasting } => format!("10% 429 Retry-After ({})", secs(lasting)),
            Fault::CutStream { resource, after } => {
                format!(
                    "stream cut ({} after {after})",
                    resource.split('.').next().unwrap_or(resource)
                )
            }
        }
    }
}

/// A fault and the share of old objects migrated (0..1) at which it strikes.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub at: f64,
    pub fault: Fault,
}

/// How many etcd members the trial of `seed` runs: three for one seed in three, so any three
/// consecutive trials (`make test` runs three) include one, and a seed replays its layout.
pub(crate) fn members(seed: u64) -> usize {
    if seed % 3 == 2 { 3 } else { 1 }
}

/// Four faults of any kind, at increasing points of the migration; with a fair coin, a stream
/// cut armed before the migration starts (the first watch-list is then cut). On three etcd
/// members an etcd fault kills one member (the leader or a connected follower, by a coin), and
/// two more faults kill the connected follower and the leader, in a drawn order: every
/// three-member trial loses both kinds of member mid-migration.
pub(crate) fn draw(seed: u64) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let three = members(seed) == 3;
    let mut steps = Vec::new();
    if rng.random_bool(0.5) {
        steps.push(Step {
            at: 0.0,
            fault: cut(&mut rng),
        });
    }
    let millis =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_millis(rng.random_range(low..high));
    let mut points: Vec<f64> = (0..4).map(|_| rng.random_range(0.05..0.85)).collect();
    points.sort_by(f64::total_cmp);
    for at in points {
        let fault = match rng.random_range(0..6) {
            0 => Fault::KillLeader {
                down: millis(&mut rng, 200, 2_000),
            },
            1 => Fault::PauseLeader {
                past_lease: millis(&mut rng, 1_000, 3_000),
            },
            2 if three => Fault::KillMember {
                member: if rng.random_bool(0.5) {
                    Member::Leader
                } else {
                    Member::Connected
                },
                down: millis(&mut rng, 500, 3_000),
            },
            2 => Fault::RestartEtcd {
                down: millis(&mut rng, 500, 3_000),
            },
            3 => Fault::ServerErrors {
                lasting: millis(&mut rng, 2_000, 5_000),
            },
            4 => Fault::Throttling {
                lasting: millis(&mut rng, 2_000, 5_000),
            },
            _ => cut(&mut rng),
        };
        steps.push(Step { at, fault });
    }
    if three {
        let mut kills = [Member::Connected, Member::Leader];
        if rng.random_bool(0.5) {
            kills.reverse();
        }
        for member in kills {
            let at = rng.random_range(0.1..0.8);
            let down = millis(&mut rng, 500, 3_000);
            steps.push(Step {
                at,
                fault: Fault::KillMember { member, down },
            });
        }
        steps.sort_by(|a, b| a.at.total_cmp(&b.at));
    }
    steps
}

fn cut(rng: &mut StdRng) -> Fault {
    Fault::CutStream {
        resource: if rng.random_bool(0.5) {
            "configmaps"
        } else {
            "widgets.example.test"
        },
        after: rng.random_range(50..3_000),
    }
}

#[test]
fn a_seed_draws_the_same_plan() {
    let labels = |seed| {
        draw(seed)
            .iter()
            .map(|s| format!("{:.3} {}", s.at, s.fault.label()))
            .collect::<Vec<_>>()
    };
    assert_eq!(labels(7), labels(7));
    assert_ne!(labels(7), labels(8));
    for seed in 0..200 {
        let plan = draw(seed);
        let kills = |member| {
            plan.iter()
                .filter(|s| matches!(s.fault, Fault::KillMember { member: m, .. } if m == member))
                .count()
        };
        if members(seed) == 3 {
            assert!((6..=7).contains(&plan.len()));
            assert!(kills(Member::Leader) >= 1 && kills(Member::Connected) >= 1);
            assert!(
                !plan
                    .iter()
                    .any(|s| matches!(s.fault, Fault::RestartEtcd { .. }))
            );
        } else {
            assert!((4..=5).contains(&plan.len()));
            assert_eq!(kills(Member::Leader) + kills(Member::Connected), 0);
        }
        assert!(plan.windows(2).all(|w| w[0].at <= w[1].at));
    }
    assert_eq!(
        (0..3).filter(|seed| members(*seed) == 3).count(),
        1,
        "one trial in three runs three members"
    );
}

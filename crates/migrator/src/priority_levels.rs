//! kube-apiserver's own account of API Priority and Fairness per priority level:
//! `GET /debug/api_priority_and_fairness/dump_priority_levels`, a few comma-separated lines —
//!
//! ```text
//! PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests, DispatchedRequests, …
//! exempt,            0,            false,  false,       0,               1,                 444,                …
//! ```
//!
//! (v1.36.2, padded with spaces). What the migrator's `/metrics` reading needs of APF, at a
//! few hundred bytes where `/metrics` is hundreds of kilobytes: the requests executing and
//! waiting now, and `DispatchedRequests`, a counter since the level was created. Columns are
//! found by their header, so a column added upstream changes nothing. No crate reads it (it
//! is a debugging endpoint with no client library of its own).

/// One priority level's line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Level {
    pub name: String,
    pub executing: f64,
    pub waiting: f64,
    /// Requests dispatched (started executing) since the level was created.
    pub dispatched: f64,
}

/// The path of the dump.
pub(crate) const PATH: &str = "/debug/api_priority_and_fairness/dump_priority_levels";

const NAME: &str = "PriorityLevelName";
const EXECUTING: &str = "ExecutingRequests";
const WAITING: &str = "WaitingRequests";
const DISPATCHED: &str = "DispatchedRequests";

/// The levels of a dump; `None` when it is not one (no header with the four columns, or a
/// line whose counts do not parse: a cut or foreign body is refused, never half read).
pub(crate) fn parse(text: &str) -> Option<Vec<Level>> {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let header: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let (name, executing, waiting, dispatched) = (
        column(NAME)?,
        column(EXECUTING)?,
        column(WAITING)?,
        column(DISPATCHED)?,
    );
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            if cells.len() != header.len() {
                return None;
            }
            let count = |at: usize| cells[at].parse::<f64>().ok().filter(|n| *n >= 0.0);
            Some(Level {
                name: cells[name].to_string(),
                executing: count(executing)?,
                waiting: count(waiting)?,
                dispatched: count(dispatched)?,
            })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What kube-apiserver v1.36.2 answered (envtest's binary, idle, a cluster-admin reading),
    /// with `extra` lines appended.
    pub(crate) fn dump(extra: &[&str]) -> String {
        let mut text = String::from(
            "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, CancelledRequests
catch-all,         0,            true,   false,       0,               0,                 0,                  0,                0,                0
exempt,            0,            false,  false,       0,               1,                 444,                0,                0,                0
global-default,    0,            true,   false,       0,               0,                 0,                  0,                0,                0
leader-election,   0,            true,   false,       0,               0,                 0,                  0,                0,                0
node-high,         0,            true,   false,       0,               0,                 0,                  0,                0,                0
system,            0,            true,   false,       0,               0,                 0,                  0,                0,                0
workload-high,     0,            true,   false,       0,               0,                 0,                  0,                0,                0
workload-low,      0,            true,   false,       0,               0,                 0,                  0,                0,                0
",
        );
        for line in extra {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    #[test]
    fn every_level_is_read_by_its_columns_names() {
        let levels = parse(&dump(&[
            "svm-apiserver-migrator, 2, false, false, 7, 24, 10031, 0, 0, 0",
        ]))
        .expect("a dump");
        assert_eq!(levels.len(), 9);
        assert_eq!(
            levels[1],
            Level {
                name: "exempt".into(),
                executing: 1.0,
                waiting: 0.0,
                dispatched: 444.0
            }
        );
        assert_eq!(
            levels[8],
            Level {
                name: "svm-apiserver-migrator".into(),
                executing: 24.0,
                waiting: 7.0,
                dispatched: 10031.0
            }
        );
        // Columns in another order (or one more) are found by name.
        let moved = "IsIdle, PriorityLevelName, DispatchedRequests, NewColumn, ExecutingRequests, WaitingRequests\nfalse, exempt, 9, x, 2, 1\n";
        assert_eq!(
            parse(moved),
            Some(vec![Level {
                name: "exempt".into(),
                executing: 2.0,
                waiting: 1.0,
                dispatched: 9.0
            }])
        );
    }

    #[test]
    fn what_is_not_a_whole_dump_is_refused() {
        for body in [
            "",
            "404 page not found\n",
            "# HELP apiserver_request_total\napiserver_request_total 3\n",
            // Cut inside a line.
            "PriorityLevelName, WaitingRequests, ExecutingRequests, DispatchedRequests\nexempt, 0, 1",
            // A count that is not one.
            "PriorityLevelName, WaitingRequests, ExecutingRequests, DispatchedRequests\nexempt, 0, one, 4\n",
            "PriorityLevelName, WaitingRequests, ExecutingRequests, DispatchedRequests\nexempt, 0, -1, 4\n",
        ] {
            assert_eq!(parse(body), None, "{body:?}");
        }
    }
}

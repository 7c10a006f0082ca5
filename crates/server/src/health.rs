//! `/healthz`, `/livez`, `/readyz` (and `/<endpoint>/<check>`), answering like kube-apiserver's
//! healthz package: `ok`, or with `?verbose` one `[+]check ok` line per check; a failure is a
//! 500 listing every check and `<endpoint> check failed`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};

use super::AppState;
use super::params::Query;

/// A named check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Ping,
    Log,
    Etcd,
    Shutdown,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Log => "log",
            Check::Etcd => "etcd",
            Check::Shutdown => "shutdown",
        }
    }

    async fn run(self, state: &AppState) -> Result<(), String> {
        match self {
            Check::Ping | Check::Log => Ok(()),
            Check::Etcd => state.storage.health().await.map_err(|e| e.to_string()),
            Check::Shutdown => {
                if state.shutdown.is_shutting_down() {
                    Err("process is shutting down".into())
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// Which checks an endpoint runs. Liveness leaves storage out on purpose: a storage outage
/// should take the server out of rotation (readyz), not get it restarted.
fn checks_of(endpoint: &str) -> Option<&'static [Check]> {
    match endpoint {
        "healthz" => Some(&[Check::Ping, Check::Log, Check::Etcd]),
        "livez" => Some(&[Check::Ping, Check::Log]),
        "readyz" => Some(&[Check::Ping, Check::Log, Check::Etcd, Check::Shutdown]),
        _ => None,
    }
}

fn text(code: StatusCode, body: String) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        body,
    )
        .into_response()
}

pub(crate) async fn endpoint(
    State(state): State<AppState>,
    uri: http::Uri,
    Path(endpoint): Path<String>,
) -> Response {
    let Some(checks) = checks_of(&endpoint) else {
        return super::status::page_not_found();
    };
    let query = Query::parse(uri.query());
    let verbose = query.get("verbose").is_some();
    let excluded = query.all("exclude");
    let mut report = String::new();
    let mut failed = false;
    for check in checks {
        if excluded.contains(&check.name()) {
            report.push_str(&format!("[+]{} excluded: ok\n", check.name()));
            continue;
        }
        match check.run(&state).await {
            Ok(()) => report.push_str(&format!("[+]{} ok\n", check.name())),
            Err(err) => {
                tracing::warn!(check = check.name(), error = %err, "{endpoint} check failed");
                failed = true;
                report.push_str(&format!("[-]{} failed: reason withheld\n", check.name()));
            }
        }
    }
    if failed {
        // Go's http.Error appends a newline.
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{report}{endpoint} check failed\n"),
        );
    }
    if !verbose {
        return text(StatusCode::OK, "ok".into());
    }
    text(StatusCode::OK, format!("{report}{endpoint} check passed\n"))
}

pub(crate) async fn single_check(
    State(state): State<AppState>,
    Path((endpoint, name)): Path<(String, String)>,
) -> Response {
    let check = checks_of(&endpoint).and_then(|checks| checks.iter().find(|c| c.name() == name));
    let Some(check) = check else {
        return super::status::page_not_found();
    };
    match check.run(&state).await {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {err}\n"),
        ),
    }
}

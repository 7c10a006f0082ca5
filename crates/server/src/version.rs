//! The version this server reports (`/version`, the OpenAPI documents).

/// This server's version as `git describe` would put it.
pub(crate) fn git_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

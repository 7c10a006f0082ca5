//! Why the server could not be set up — a certificate, a key, a CA bundle, a kubeconfig, the
//! cluster's published authentication settings, an address — typed, with every cause kept
//! (`std::error::Error::source`). What a request meets at run time is [`svm_registry::ApiError`],
//! mapped once to a metav1.Status (`status.rs`); this is what stops the server from starting.
//!
//! [`Context`] adds what was being done to a failure, as `anyhow::Context` would, but the cause
//! stays one of the typed [`Cause`]s.

use std::error::Error as _;
use std::fmt;

/// What a setup step failed on: the error of the library that refused, kept whole.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// Reading or writing a file, binding a socket.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A PEM file that does not parse.
    #[error(transparent)]
    Pem(#[from] rustls_pki_types::pem::Error),
    /// rustls refused a certificate, a key or a configuration.
    #[error(transparent)]
    Tls(#[from] rustls::Error),
    /// rustls could not build a client-certificate verifier.
    #[error(transparent)]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A kubeconfig that does not load.
    #[error(transparent)]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// The in-cluster configuration (a pod's service account) that does not load.
    #[error(transparent)]
    InCluster(#[from] kube::config::InClusterError),
    /// The cluster client could not be built, or the cluster refused a read.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A JSON value of the cluster that is not what it should be.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A kubeconfig that could not be written as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_norway::Error),
    /// The development PKI could not be made.
    #[error(transparent)]
    DevCerts(#[from] svm_devcerts::DevCertError),
    /// A step of its own that failed, with its own cause.
    #[error(transparent)]
    Setup(#[from] Box<SetupError>),
}

impl From<SetupError> for Cause {
    fn from(err: SetupError) -> Self {
        Cause::Setup(Box::new(err))
    }
}

/// Why the server could not be set up. `{}` says what failed; `{:#}` adds every cause, as
/// `a: b: c`.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SetupError(Kind);

#[derive(Debug)]
enum Kind {
    /// `what` failed because of `source`.
    Failed { what: String, source: Cause },
    /// A setting that is wrong in itself (a file without a certificate, an invalid header
    /// name): nothing below it failed.
    Invalid(String),
}

impl SetupError {
    /// A setting that is wrong in itself, said in `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        SetupError(Kind::Invalid(message.into()))
    }

    /// `what` failed because of `source`.
    pub fn failed(what: impl Into<String>, source: impl Into<Cause>) -> Self {
        SetupError(Kind::Failed {
            what: what.into(),
            source: source.into(),
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Failed { what, .. } => f.write_str(what)?,
            Kind::Invalid(message) => f.write_str(message)?,
        }
        if f.alternate() {
            let mut cause = self.source();
            while let Some(err) = cause {
                write!(f, ": {err}")?;
                cause = err.source();
            }
        }
        Ok(())
    }
}

impl std::error::Error for Kind {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Kind::Failed { source, .. } => Some(source),
            Kind::Invalid(_) => None,
        }
    }
}

/// The result of a setup step.
pub type SetupResult<T, E = SetupError> = Result<T, E>;

/// What was being done, added to a failure (`anyhow::Context`'s shape, typed).
pub trait Context<T> {
    /// The failure, as a failure of `what`.
    fn context(self, what: impl Into<String>) -> SetupResult<T>;

    /// As [`Context::context`], with `what` made only on failure.
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> SetupResult<T>;
}

impl<T, E: Into<Cause>> Context<T> for Result<T, E> {
    fn context(self, what: impl Into<String>) -> SetupResult<T> {
        self.map_err(|err| SetupError::failed(what, err))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> SetupResult<T> {
        self.map_err(|err| SetupError::failed(what(), err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alternate_form_walks_every_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let inner: SetupResult<()> = Err(io).context("reading ca.crt");
        let outer = inner.context("--client-ca-file").unwrap_err();
        assert_eq!(outer.to_string(), "--client-ca-file");
        assert_eq!(
            format!("{outer:#}"),
            "--client-ca-file: reading ca.crt: no such file"
        );
        let cause = outer.source().expect("a cause");
        assert_eq!(cause.to_string(), "reading ca.crt");
        assert_eq!(
            cause.source().expect("its cause").to_string(),
            "no such file"
        );
        assert_eq!(
            SetupError::invalid("ca.crt holds no PEM certificate").to_string(),
            "ca.crt holds no PEM certificate"
        );
    }
}

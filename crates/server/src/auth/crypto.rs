//! The one crypto provider this crate is built with (ring), for every TLS configuration and
//! certificate verification alike.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The provider: ring.
pub(crate) fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

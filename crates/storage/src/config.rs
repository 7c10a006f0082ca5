//! Which backend the server runs on, from its flags, and opening it.

/// Which backend to run on, as the server's flags choose it.
#[derive(Debug, Clone)]
pub enum StorageConfig {
    /// The embedded store, durable in this data directory.
    Embedded {
        /// The data directory (`--data-dir`), created if missing.
        dir: std::path::PathBuf,
        /// Watch progress and buffer tuning.
        options: crate::embedded::EmbeddedOptions,
    },
    /// The embedded store without a disk (tests, demos): everything is lost on exit.
    InMemory {
        /// Watch progress and buffer tuning.
        options: crate::embedded::EmbeddedOptions,
    },
    /// An etcd cluster at these client URLs.
    Etcd {
        /// etcd's client URLs (`--etcd-servers`), `http://` or `https://`.
        endpoints: Vec<String>,
        /// Timeouts, keep-alive, watch progress and TLS.
        options: crate::etcd::EtcdOptions,
    },
}

/// Open the configured backend; fails when the data directory cannot be used or etcd does not
/// answer.
pub async fn connect(config: StorageConfig) -> crate::Result<std::sync::Arc<dyn crate::Storage>> {
    Ok(match config {
        StorageConfig::Embedded { dir, options } => {
            std::sync::Arc::new(crate::embedded::EmbeddedStorage::open_with(dir, options).await?)
        }
        StorageConfig::InMemory { options } => {
            std::sync::Arc::new(crate::embedded::EmbeddedStorage::in_memory_with(options))
        }
        StorageConfig::Etcd { endpoints, options } => {
            std::sync::Arc::new(crate::etcd::EtcdStorage::connect(&endpoints, options).await?)
        }
    })
}

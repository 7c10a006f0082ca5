//! The `svm-apiserver` binary: a CLI over the crates of the workspace (crates/, one per layer).
//! Nothing but wiring lives here.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use svm_controllers::ControllerOptions;
use svm_server::auth::{Auth, AuthOptions, CaBundle};
use svm_server::{AppState, ServeOptions};
use svm_storage::{Storage, StorageConfig, compactor};

#[derive(Parser)]
#[command(
    name = "svm-apiserver",
    version,
    about = "The storagemigration.k8s.io aggregated API server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the storagemigration.k8s.io API over HTTPS.
    Serve(Box<ServeArgs>),
    /// Write a development PKI (CA, serving cert, admin client cert, front-proxy CA and client
    /// cert) into a directory, keeping a complete set that is already there.
    Certs {
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
    },
    /// Carry kube-storage-version-migrator's StorageStates and StorageVersionMigrations
    /// (migration.k8s.io/v1alpha1) over to this server, through its API; idempotent.
    ImportKsvm(svm_controllers::ImportOptions),
    /// Check or repair the embedded store's data directory (stop the server first).
    #[command(subcommand)]
    Store(StoreCommand),
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Read the write-ahead log and report any damage, changing nothing. Exits 1 when the
    /// store would refuse to open (damage that is not a torn final record).
    Verify {
        #[arg(long, default_value = ".dev/data")]
        data_dir: PathBuf,
    },
    /// Make a damaged store openable: keep every record before the damage, say how many
    /// intact records after it are lost, and keep the damaged log beside it.
    Recover {
        #[arg(long, default_value = ".dev/data")]
        data_dir: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    server: ServeOptions,
    #[command(flatten)]
    storage: StorageOptions,
    #[command(flatten)]
    auth: AuthOptions,
    #[command(flatten)]
    controllers: ControllerOptions,
    /// Serve storage.svm-apiserver.io VolumeClaimMigrations and run their controller (alpha).
    #[arg(long)]
    enable_volume_claim_migrations: bool,
    /// Serve storage.svm-apiserver.io DataPlaneRollouts and run their controller (alpha).
    #[arg(long)]
    enable_data_plane_rollouts: bool,
}

#[derive(clap::Args)]
struct StorageOptions {
    /// etcd client URLs, comma-separated (e.g. http://127.0.0.1:2379). Without any, the
    /// embedded store in --data-dir is used.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// The key prefix of every object this server keeps (in etcd or the embedded store).
    #[arg(long, default_value = "/svm-apiserver")]
    etcd_prefix: String,
    /// Where the embedded store keeps its data (when no --etcd-servers is given).
    #[arg(long, default_value = ".dev/data")]
    data_dir: PathBuf,
    /// SSL Certificate Authority file used to secure etcd communication (https:// endpoints).
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// SSL certification file used to secure etcd communication (its client certificate).
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// SSL key file used to secure etcd communication.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// How often storage history older than one interval is compacted, as kube-apiserver's flag
    /// (Go duration: 5m, 30s; 0 disables). etcd compaction is keyspace-wide: on an etcd shared
    /// with others, set 0 and leave compaction to its owner. Watches and continue tokens older
    /// than the compacted revision get 410 Expired. (--compaction-interval: deprecated alias.)
    #[arg(
        long = "etcd-compaction-interval",
        alias = "compaction-interval",
        default_value = "5m",
        value_parser = svm_registry::duration::go_duration
    )]
    compaction_interval: Duration,
    /// How often an idle watch that asked for bookmarks receives one.
    #[arg(long, default_value = "60s", value_parser = svm_registry::duration::go_duration)]
    watch_bookmark_interval: Duration,
}

impl StorageOptions {
    fn config(&self) -> anyhow::Result<StorageConfig> {
        let tls = svm_storage::etcd::tls::EtcdTlsFiles {
            ca: self.etcd_cafile.clone(),
            cert: self.etcd_certfile.clone(),
            key: self.etcd_keyfile.clone(),
        }
        .load()?
        .map(Arc::new);
        Ok(if self.etcd_servers.is_empty() {
            StorageConfig::Embedded {
                dir: self.data_dir.clone(),
                options: svm_storage::embedded::EmbeddedOptions {
                    progress_interval: self.watch_bookmark_interval,
                    ..Default::default()
                },
            }
        } else {
            StorageConfig::Etcd {
                endpoints: self.etcd_servers.clone(),
                options: svm_storage::etcd::EtcdOptions {
                    progress_interval: self.watch_bookmark_interval,
                    tls,
                    ..Default::default()
                },
            }
        })
    }

    async fn open(&self) -> anyhow::Result<Arc<dyn Storage>> {
        if std::env::args().any(|arg| arg.starts_with("--compaction-interval")) {
            tracing::warn!("--compaction-interval is deprecated: use --etcd-compaction-interval");
        }
        let storage = svm_storage::connect(self.config()?)
            .await
            .with_context(|| {
                if self.etcd_servers.is_empty() {
                    format!("opening the embedded store in {}", self.data_dir.display())
                } else {
                    format!("connecting to etcd at {}", self.etcd_servers.join(","))
                }
            })?;
        if self.etcd_servers.is_empty() {
            tracing::info!(dir = %self.data_dir.display(), "using the embedded store");
        } else {
            tracing::info!(endpoints = %self.etcd_servers.join(","), "using etcd");
        }
        Ok(storage)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: logs collected from a pod or a file stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Serve(args) => serve(*args).await,
        Command::Certs { dir } => {
            let files = svm_devcerts::generate(&dir)?;
            println!(
                "development PKI in {} (CA: {})",
                dir.display(),
                files.ca_cert.display()
            );
            Ok(())
        }
        Command::ImportKsvm(options) => Ok(svm_controllers::import_ksvm(&options).await?),
        Command::Store(StoreCommand::Verify { data_dir }) => {
            let verification = svm_storage::embedded::verify(&data_dir)
                .with_context(|| format!("reading the store in {}", data_dir.display()))?;
            println!("{verification}");
            if verification.damage.as_ref().is_some_and(|d| !d.torn) {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Store(StoreCommand::Recover { data_dir }) => {
            let recovery = svm_storage::embedded::recover(&data_dir)
                .with_context(|| format!("recovering the store in {}", data_dir.display()))?;
            println!("{recovery}");
            Ok(())
        }
    }
}

async fn serve(mut args: ServeArgs) -> anyhow::Result<()> {
    // With development certificates (no --tls-cert-file) the dev CA is trusted for client
    // certificates too: the kubeconfig written at start carries its admin certificate
    // (O=system:masters), so `make run` works without any cluster. It is added to the client
    // CA of --client-ca-file or of the cluster's extension-apiserver-authentication, never put
    // in its place: a certificate the cluster issued (a Prometheus scraping /metrics) still
    // authenticates, and the front proxy's CA is read from the cluster as without dev certs.
    let dev_ca = match args.server.tls_cert_file {
        Some(_) => None,
        None => {
            let dev = svm_server::ensure_dev_certs(&args.server.cert_dir)?;
            tracing::info!(ca = %dev.ca_cert.display(), "development certificates: their CA is trusted for client certificates too");
            Some(CaBundle::from_file(&dev.ca_cert)?)
        }
    };
    delegate_to_the_migrated_cluster(&mut args);
    let auth = Arc::new(Auth::from_options_with(&args.auth, dev_ca).await?);
    let storage = args.storage.open().await?;
    let kinds = svm_api::Kinds {
        volume_claim_migrations: args.enable_volume_claim_migrations,
        data_plane_rollouts: args.enable_data_plane_rollouts,
    };
    let api = svm_api::install(storage.clone(), &args.storage.etcd_prefix, kinds);
    let compaction = tokio::spawn(compactor::run(
        storage.clone(),
        args.storage.compaction_interval,
    ));
    let state = AppState::new(api.registry.clone(), storage.clone()).with_auth(auth);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let controllers = svm_controllers::start(
        &args.controllers,
        &api,
        storage.clone(),
        &args.storage.etcd_prefix,
        &state.metrics,
        shutdown.clone(),
    )
    .await?;
    let signal = {
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            shutdown.cancel();
        }
    };
    let result = svm_server::serve(args.server, state, signal).await;
    shutdown.cancel();
    controllers.join().await;
    compaction.abort();
    Ok(result?)
}

/// Out of a cluster a user gives one kubeconfig, and expects the cluster it names to be the
/// one whose aggregator calls us: so `--kubeconfig` also reviews tokens and authorizes requests
/// (and supplies the front proxy's CA) unless `--authentication-kubeconfig` /
/// `--authorization-kubeconfig` say otherwise. The log says which kubeconfig each one uses.
fn delegate_to_the_migrated_cluster(args: &mut ServeArgs) {
    let kubeconfig = args.controllers.kubeconfig.clone();
    let auth = &mut args.auth;
    for (flag, slot) in [
        (
            "--authentication-kubeconfig",
            &mut auth.authentication_kubeconfig,
        ),
        (
            "--authorization-kubeconfig",
            &mut auth.authorization_kubeconfig,
        ),
    ] {
        match (&*slot, &kubeconfig) {
            (Some(path), _) => {
                tracing::info!(flag, kubeconfig = %path.display(), "delegating to the given kubeconfig")
            }
            (None, Some(path)) => {
                tracing::info!(flag, kubeconfig = %path.display(), "not given: delegating to --kubeconfig");
                *slot = Some(path.clone());
            }
            (None, None) => {}
        }
    }
}

/// SIGTERM (kubelet) or Ctrl-C: stop accepting, drain, exit.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

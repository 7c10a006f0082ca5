//! `kube-double`: the kube-apiserver test double as its own process, for benchmarks.
//!
//! ```text
//! kube-double --port 6443 --preload configmaps=100000:10240 --fault 'verb=patch,fraction=0.01,fault=503'
//! ```
//! It prints one line, `listening on <url>`, once it serves; counters and read-backs are at
//! `/_double/...` (see the `admin` module).

use std::time::Duration;

use clap::Parser;
use kube_double::{FaultRule, KubeDouble};

#[derive(Parser, Debug)]
#[command(name = "kube-double", about = "A kube-apiserver test double")]
struct Args {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,

    /// Serve HTTPS; the CA is written to --ca-file.
    #[arg(long)]
    tls: bool,

    /// Where to write the serving CA (with --tls).
    #[arg(long)]
    ca_file: Option<std::path::PathBuf>,

    /// Where to write a kubeconfig for the double.
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,

    /// Objects to create at start: `<resource>=<count>[:<payload bytes>][@<namespace>]`,
    /// e.g. `configmaps=20000:1024@bench` or `widgets.example.test=1000`. Repeatable.
    #[arg(long)]
    preload: Vec<String>,

    /// A CRD to serve: `<plural>.<group>=<Kind>:<v1>,<v2>...` (first version is the
    /// storage version). Repeatable; created before preloading.
    #[arg(long)]
    crd: Vec<String>,

    /// A fault rule (see `FaultRule`'s `FromStr`). Repeatable.
    #[arg(long)]
    fault: Vec<String>,

    /// Compact every this many seconds, like kube-apiserver's --etcd-compaction-interval
    /// (default 5 minutes): continue tokens expire after one to two intervals, and the
    /// history of rewritten objects is freed. 0 disables compaction.
    #[arg(long, default_value_t = 300)]
    compaction_interval_seconds: u64,

    /// Answer watch-list requests with etcd 3.4's 500 ERROR event.
    #[arg(long)]
    no_watch_list: bool,
}

struct Preload {
    resource: String,
    count: usize,
    payload: usize,
    namespace: String,
}

fn parse_preload(spec: &str) -> Result<Preload, String> {
    let (resource, rest) = spec
        .split_once('=')
        .ok_or_else(|| format!("--preload {spec:?}: expected <resource>=<count>"))?;
    let (rest, namespace) = match rest.split_once('@') {
        Some((r, ns)) => (r, ns.to_string()),
        None => (rest, "default".to_string()),
    };
    let (count, payload) = match rest.split_once(':') {
        Some((c, p)) => (c, p.parse().map_err(|e| format!("--preload payload: {e}"))?),
        None => (rest, 256),
    };
    Ok(Preload {
        resource: resource.to_string(),
        count: count.parse().map_err(|e| format!("--preload count: {e}"))?,
        payload,
        namespace,
    })
}

fn parse_crd(spec: &str) -> Result<serde_json::Value, String> {
    let (name, rest) = spec
        .split_once('=')
        .ok_or_else(|| format!("--crd {spec:?}: expected <plural>.<group>=<Kind>:<versions>"))?;
    let (plural, group) = name
        .split_once('.')
        .ok_or_else(|| format!("--crd {spec:?}: name must be <plural>.<group>"))?;
    let (kind, versions) = rest
        .split_once(':')
        .ok_or_else(|| format!("--crd {spec:?}: expected <Kind>:<versions>"))?;
    let versions: Vec<&str> = versions.split(',').filter(|v| !v.is_empty()).collect();
    if versions.is_empty() {
        return Err(format!("--crd {spec:?}: no versions"));
    }
    Ok(kube_double::crd_manifest(group, plural, kind, &versions))
}

async fn run(args: Args) -> Result<(), String> {
    let mut builder = KubeDouble::builder()
        .port(args.port)
        .tls(args.tls)
        .watch_list(!args.no_watch_list);
    if args.compaction_interval_seconds > 0 {
        builder =
            builder.compaction_interval(Duration::from_secs(args.compaction_interval_seconds));
    }
    let double = builder.start().await.map_err(|e| e.to_string())?;
    for spec in &args.crd {
        double
            .create_crd(parse_crd(spec)?)
            .map_err(|e| format!("--crd {spec:?}: {e}"))?;
    }
    for spec in &args.preload {
        let p = parse_preload(spec)?;
        double
            .ensure_namespace(&p.namespace)
            .map_err(|e| e.to_string())?;
        double
            .preload(&p.resource, Some(&p.namespace), "obj", p.count, p.payload)
            .map_err(|e| format!("--preload {spec:?}: {e}"))?;
    }
    for spec in &args.fault {
        let rule: FaultRule = spec.parse().map_err(|e| format!("--fault {spec:?}: {e}"))?;
        double.add_fault(rule);
    }
    if let Some(path) = &args.ca_file {
        std::fs::write(path, double.ca_pem()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.kubeconfig {
        std::fs::write(path, double.kubeconfig_yaml())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    double.reset_counters();
    println!("listening on {}", double.url());
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("waiting for ctrl-c: {e}"))?;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("kube-double: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_specs() {
        let p = parse_preload("configmaps=20000:1024@bench").unwrap();
        assert_eq!(
            (
                p.resource.as_str(),
                p.count,
                p.payload,
                p.namespace.as_str()
            ),
            ("configmaps", 20000, 1024, "bench")
        );
        let p = parse_preload("widgets.example.test=10").unwrap();
        assert_eq!(
            (p.count, p.payload, p.namespace.as_str()),
            (10, 256, "default")
        );
        assert!(parse_preload("configmaps").is_err());
        assert!(parse_crd("widgets.example.test=Widget:v1,v2").is_ok());
        assert!(parse_crd("widgets=Widget:v1").is_err());
    }
}

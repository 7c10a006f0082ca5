//! kube-recorder: records the real kube-apiserver's protobuf exchanges as the fixture files of
//! `tests/fixtures/recordings/` (20a-...), in the format its README.md describes. Run by
//! `hack/record-protobuf.sh`, which starts etcd and kube-apiserver on loopback:
//!
//! ```text
//! kube-recorder pki --dir DIR                       # a throw-away PKI for kube-apiserver and us
//! kube-recorder free-port                           # a free 127.0.0.1 port
//! kube-recorder wait-ready --port P --pki DIR [--pid PID]  # until /readyz says ok
//!                                                   # (exit 1 on timeout or when PID exits)
//! kube-recorder record --port P --pki DIR --out DIR --set beta \
//!               --apiserver-log FILE --v1alpha1-start FILE
//! kube-recorder etcd-prime --etcd-port P            # 20 writes and a compaction, so that an
//!                                                   # old resourceVersion is too old
//! kube-recorder record --port P --pki DIR --out DIR --set alpha  # if v1alpha1 is ever served
//! ```
//!
//! Every protobuf request body is encoded with k8s-pb and prost (never written by hand), so the
//! real server checks that encoding independently.

mod http;
mod pki;
mod render;
mod scenarios;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| -> Result<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .with_context(|| format!("{name} is required"))
    };
    match args.first().map(String::as_str) {
        Some("pki") => pki::generate(&PathBuf::from(flag("--dir")?)),
        Some("free-port") => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding :0")?;
            println!("{}", listener.local_addr()?.port());
            Ok(())
        }
        Some("wait-ready") => {
            let port: u16 = flag("--port")?.parse().context("--port")?;
            let client = http::Client::new(port, &PathBuf::from(flag("--pki")?))?;
            let pid = flag("--pid").ok();
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if let Some(pid) = &pid
                    && exited(pid)
                {
                    bail!("kube-apiserver (pid {pid}) exited before it was ready");
                }
                if let Ok(answer) = client.send(http::Request::get("/readyz"))
                    && answer.status == 200
                {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    bail!("kube-apiserver on port {port} not ready within 120 s");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        Some("etcd-prime") => {
            let port: u16 = flag("--etcd-port")?.parse().context("--etcd-port")?;
            let mut revision = serde_json::Value::Null;
            // key /recorder/revision, value x (base64, as etcd's gateway takes them)
            let put = serde_json::json!({"key": "L3JlY29yZGVyL3JldmlzaW9u", "value": "eA=="});
            let deadline = Instant::now() + Duration::from_secs(30);
            // etcd may still be starting.
            while http::etcd_post(port, "/v3/kv/put", &put).is_err() {
                if Instant::now() > deadline {
                    bail!("etcd on port {port} not answering within 30 s");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            for _ in 0..20 {
                revision = http::etcd_post(port, "/v3/kv/put", &put)?["header"]["revision"].clone();
            }
            let compact = serde_json::json!({"revision": revision, "physical": true});
            http::etcd_post(port, "/v3/kv/compaction", &compact)?;
            eprintln!("recorder: etcd at revision {revision}, compacted");
            Ok(())
        }
        Some("record") => {
            let port: u16 = flag("--port")?.parse().context("--port")?;
            let client = http::Client::new(port, &PathBuf::from(flag("--pki")?))?;
            let out = PathBuf::from(flag("--out")?);
            match flag("--set")?.as_str() {
                "beta" => {
                    let v1alpha1 = std::fs::read_to_string(flag("--v1alpha1-start")?)
                        .context("--v1alpha1-start: what the start with v1alpha1 said")?;
                    let log = PathBuf::from(flag("--apiserver-log")?);
                    scenarios::record_all(&client, &out, &log, v1alpha1.trim())
                }
                "alpha" => scenarios::record_v1alpha1(),
                other => bail!("--set {other}: beta or alpha"),
            }
        }
        _ => bail!(
            "usage: kube-recorder pki --dir DIR | free-port | wait-ready --port P --pki DIR \
             [--pid PID] | record --port P --pki DIR --out DIR --set beta --apiserver-log FILE --v1alpha1-start FILE \
             | record --port P --pki DIR --out DIR --set alpha | etcd-prime --etcd-port P"
        ),
    }
}

/// The process is gone or a zombie (exited, not yet reaped by the script).
fn exited(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

#!/usr/bin/env bash
# Records the protobuf fixtures (tests/fixtures/recordings/20*.txt) from the real kube-apiserver:
#   - etcd and kube-apiserver from $(hack/envtest.sh), on free 127.0.0.1 ports, with a throw-away
#     PKI made by the recorder (tests/support/recorder), flags as tests/support/control_plane.rs
#     plus storagemigration.k8s.io/v1beta1 and the StorageVersionMigrator gate;
#   - first kube-apiserver is started with storagemigration.k8s.io/v1alpha1 in --runtime-config
#     too, to see whether it serves that version (v1.36.2 refuses to start: 20f quotes why);
#   - then with v1beta1 only, and the recorder writes 20a..20h and 21 (the two 429s) against it;
#   - everything it started is stopped, the temporary directory removed.
# Nothing listens beyond loopback; nothing is sent beyond it.
#
#   hack/record-protobuf.sh              # writes into tests/fixtures/recordings
#   OUT=/tmp/x hack/record-protobuf.sh   # writes elsewhere (to compare with the committed files)
#   KEEP_TMP=1 hack/record-protobuf.sh   # keeps the PKI and the etcd and kube-apiserver logs
set -euo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-tests/fixtures/recordings}
assets=$(hack/envtest.sh)
[ -n "$assets" ] || { echo "record-protobuf: no kube-apiserver (hack/envtest.sh printed nothing)" >&2; exit 1; }

cargo build --quiet -p kube-recorder
recorder=$PWD/target/debug/kube-recorder

tmp=$(mktemp -d)
etcd_pid= kas_pid=
stop() { # pid: SIGTERM, then SIGKILL after 5 s
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop "$kas_pid"
  stop "$etcd_pid"
  if [ -n "${KEEP_TMP:-}" ]; then echo "record-protobuf: logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

"$recorder" pki --dir "$tmp/pki"
pki=$tmp/pki

client_port=$("$recorder" free-port)
peer_port=$("$recorder" free-port)
"$assets/etcd" --name=recorder --data-dir="$tmp/etcd" \
  --listen-client-urls="http://127.0.0.1:$client_port" --advertise-client-urls="http://127.0.0.1:$client_port" \
  --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
  --initial-cluster="recorder=http://127.0.0.1:$peer_port" --initial-cluster-state=new \
  --listen-metrics-urls="http://127.0.0.1:$("$recorder" free-port)" \
  >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!

# start_kas <runtime-config> <log name>: kube-apiserver on a fresh free port; sets kas_pid and kas_port.
start_kas() {
  kas_port=$("$recorder" free-port)
  "$assets/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$client_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$kas_port" \
    --cert-dir="$tmp/kas-certs" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --authorization-mode=Node,RBAC \
    --service-cluster-ip-range=127.96.0.0/16 --enable-aggregator-routing=true \
    --endpoint-reconciler-type=none --profiling=false \
    --runtime-config="$1" --feature-gates=StorageVersionMigrator=true \
    >"$tmp/kube-apiserver-$2.log" 2>&1 &
  kas_pid=$!
}

start=$(date +%s)
# 1. Does kube-apiserver serve storagemigration.k8s.io/v1alpha1? Started with it in
#    --runtime-config: its answer (the line it exits with, or that it became ready) goes into 20f.
start_kas storagemigration.k8s.io/v1alpha1=true,storagemigration.k8s.io/v1beta1=true v1alpha1
if "$recorder" wait-ready --port "$kas_port" --pki "$pki" --pid "$kas_pid" 2>/dev/null; then
  echo "kube-apiserver became ready with --runtime-config=storagemigration.k8s.io/v1alpha1=true,storagemigration.k8s.io/v1beta1=true" >"$tmp/v1alpha1-start.txt"
  alpha_ready=1
else
  grep -m1 -E '"command failed"|^E[0-9]' "$tmp/kube-apiserver-v1alpha1.log" | sed -E 's/^E[0-9]{4} [0-9:.]+ +[0-9]+ /E... /' >"$tmp/v1alpha1-start.txt" || true
  alpha_ready=
  echo "record-protobuf: kube-apiserver refused --runtime-config=storagemigration.k8s.io/v1alpha1=true: $(cat "$tmp/v1alpha1-start.txt")" >&2
fi
if [ -n "$alpha_ready" ]; then
  "$recorder" record --port "$kas_port" --pki "$pki" --out "$out" --set alpha
fi
stop "$kas_pid"; kas_pid=

# 2. Everything else, with v1beta1 on. etcd gets 20 writes and a compaction first, as any
#    cluster's has had: the watch cache then starts past resourceVersion 1 (20b's ERROR event).
"$recorder" etcd-prime --etcd-port "$client_port"
start_kas storagemigration.k8s.io/v1beta1=true v1beta1
if ! "$recorder" wait-ready --port "$kas_port" --pki "$pki" --pid "$kas_pid"; then
  tail -40 "$tmp/kube-apiserver-v1beta1.log" >&2
  exit 1
fi
"$recorder" record --port "$kas_port" --pki "$pki" --out "$out" --set beta --apiserver-log "$tmp/kube-apiserver-v1beta1.log" \
  --v1alpha1-start "$tmp/v1alpha1-start.txt"
echo "record-protobuf: recorded in $(( $(date +%s) - start )) s (the build and etcd's start not counted)" >&2

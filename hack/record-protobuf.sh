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
name=record-protobuf
# shellcheck source=hack/lib/recording.sh
source hack/lib/recording.sh
recording_setup
start_etcd

# kas <runtime-config> <log name>: kube-apiserver with that --runtime-config and the
# StorageVersionMigrator gate; sets kas_pid and kas_port.
kas() {
  start_kas "kube-apiserver-$2.log" --runtime-config="$1" --feature-gates=StorageVersionMigrator=true
}

start=$(date +%s)
# 1. Does kube-apiserver serve storagemigration.k8s.io/v1alpha1? Started with it in
#    --runtime-config: its answer (the line it exits with, or that it became ready) goes into 20f.
kas storagemigration.k8s.io/v1alpha1=true,storagemigration.k8s.io/v1beta1=true v1alpha1
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
kas storagemigration.k8s.io/v1beta1=true v1beta1
if ! "$recorder" wait-ready --port "$kas_port" --pki "$pki" --pid "$kas_pid"; then
  tail -40 "$tmp/kube-apiserver-v1beta1.log" >&2
  exit 1
fi
"$recorder" record --port "$kas_port" --pki "$pki" --out "$out" --set beta --apiserver-log "$tmp/kube-apiserver-v1beta1.log" \
  --v1alpha1-start "$tmp/v1alpha1-start.txt"
echo "record-protobuf: recorded in $(( $(date +%s) - start )) s (the build and etcd's start not counted)" >&2

# Shared by the recording scripts (hack/record-*.sh): a throw-away etcd and kube-apiserver from
# $(hack/envtest.sh) on free 127.0.0.1 ports, with a PKI made by the recorder
# (tests/support/recorder), flags as tests/support/control_plane.rs. Nothing listens beyond
# loopback. Sourced after `cd` to the repository root; the caller sets `name` (for messages).
#
#   recording_setup          builds the recorder; sets assets, recorder, tmp, pki; stops
#                            everything and removes $tmp on exit (KEEP_TMP=1 keeps it)
#   start_etcd               sets etcd_pid and client_port
#   start_kas LOG FLAG...    kube-apiserver with the FLAGs added; sets kas_pid and kas_port
#   stop PID                 SIGTERM, then SIGKILL after 5 s

stop() {
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

recording_cleanup() {
  stop "${kas_pid:-}"
  stop "${etcd_pid:-}"
  if [ -n "${KEEP_TMP:-}" ]; then echo "$name: logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}

recording_setup() {
  assets=$(hack/envtest.sh)
  [ -n "$assets" ] || { echo "$name: no kube-apiserver (hack/envtest.sh printed nothing)" >&2; exit 1; }
  cargo build --quiet -p kube-recorder
  recorder=${CARGO_TARGET_DIR:-$PWD/target}/debug/kube-recorder
  tmp=$(mktemp -d)
  etcd_pid= kas_pid=
  trap recording_cleanup EXIT
  "$recorder" pki --dir "$tmp/pki"
  pki=$tmp/pki
}

start_etcd() {
  client_port=$("$recorder" free-port)
  local peer_port
  peer_port=$("$recorder" free-port)
  "$assets/etcd" --name=recorder --data-dir="$tmp/etcd" \
    --listen-client-urls="http://127.0.0.1:$client_port" --advertise-client-urls="http://127.0.0.1:$client_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="recorder=http://127.0.0.1:$peer_port" --initial-cluster-state=new \
    --listen-metrics-urls="http://127.0.0.1:$("$recorder" free-port)" \
    >"$tmp/etcd.log" 2>&1 &
  etcd_pid=$!
}

start_kas() {
  local log=$1; shift
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
    "$@" \
    >"$tmp/$log" 2>&1 &
  kas_pid=$!
}

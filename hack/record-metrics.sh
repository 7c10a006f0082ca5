#!/usr/bin/env bash
# Records kube-apiserver's /metrics with encryption at rest for tests/fixtures/metrics/, in both
# expositions the trigger and the migrator read (text, and Prometheus's delimited protobuf):
#   - etcd and kube-apiserver from $(hack/envtest.sh), on free 127.0.0.1 ports, with a throw-away
#     PKI made by the recorder (tests/support/recorder), flags as hack/record-protobuf.sh's plus
#     an aescbc encryption configuration for secrets with --encryption-provider-config-automatic-reload;
#   - one Secret is written, the configuration is rewritten with a second key first (an
#     automatic reload: its reload families appear), another Secret is written;
#   - /metrics is read by the admin as text and as protobuf, each trimmed to the families
#     listed in FAMILIES below (what the trigger and the migrator read, and a histogram and a
#     counter that they must skip or read whole);
#   - everything it started is stopped, the temporary directory removed.
# Nothing listens beyond loopback; nothing is sent beyond it.
#
#   hack/record-metrics.sh              # writes into tests/fixtures/metrics
#   OUT=/tmp/x hack/record-metrics.sh   # writes elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-tests/fixtures/metrics}
name=record-metrics
# shellcheck source=hack/lib/recording.sh
source hack/lib/recording.sh
recording_setup

# Two fixed throw-away keys (32 bytes each, base64): the configuration's hash in the recording
# is then the same at every recording.
key1=$(printf 'svm-apiserver-record-metrics-k01' | base64)
key2=$(printf 'svm-apiserver-record-metrics-k02' | base64)
encryption_config() { # first key name, first key, second key name, second key
  cat <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - {name: $1, secret: $2}
$( [ -n "${3:-}" ] && echo "            - {name: $3, secret: $4}" )
      - identity: {}
EOF
}
encryption_config key1 "$key1" >"$tmp/encryption.yaml"

start_etcd
start_kas kube-apiserver.log \
  --encryption-provider-config="$tmp/encryption.yaml" \
  --encryption-provider-config-automatic-reload=true
if ! "$recorder" wait-ready --port "$kas_port" --pki "$pki" --pid "$kas_pid"; then
  tail -40 "$tmp/kube-apiserver.log" >&2
  exit 1
fi

kas() { # curl as the admin: path, then curl's own arguments
  local path=$1; shift
  curl -sS --fail --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$kas_port$path" "$@"
}
secret() { # name
  kas /api/v1/namespaces/default/secrets -X POST -H 'Content-Type: application/json' \
    -d "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"$1\"},\"stringData\":{\"k\":\"v\"}}" >/dev/null
}
secret recorded-1
encryption_config key2 "$key2" key1 "$key1" >"$tmp/encryption.yaml.new"
mv "$tmp/encryption.yaml.new" "$tmp/encryption.yaml"
reload=apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds
reloaded() { kas /metrics -o "$tmp/scrape.txt" && grep -q "^$reload{" "$tmp/scrape.txt"; }
for _ in $(seq 120); do
  reloaded && break
  sleep 1
done
reloaded || { echo "record-metrics: no automatic reload within 120 s" >&2; exit 1; }
secret recorded-2

kas /metrics -H 'Accept: text/plain;version=0.0.4' -o "$tmp/metrics.txt"
kas /metrics \
  -H 'Accept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited' \
  -o "$tmp/metrics.pb" -D "$tmp/metrics.pb.headers"
grep -qi '^content-type: application/vnd.google.protobuf' "$tmp/metrics.pb.headers" \
  || { echo "record-metrics: /metrics did not answer protobuf" >&2; cat "$tmp/metrics.pb.headers" >&2; exit 1; }

# The families kept: the trigger's (crates/trigger/src/encryption.rs FAMILIES; the KMS v2 one
# needs a KMS plugin and is not there), the migrator's (crates/migrator/src/neighbours.rs),
# the reload counter, and two of encryption's own that a reader must get right without using
# them: a histogram (its `le="+Inf"` buckets, skipped) and a counter whose label values hold
# colons and slashes (`transformer_prefix="k8s:enc:aescbc:v1:"`).
FAMILIES="apiserver_encryption_config_controller_last_config_info
apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds
apiserver_encryption_config_controller_automatic_reloads_total
apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds
apiserver_flowcontrol_current_executing_requests
apiserver_flowcontrol_current_inqueue_requests
apiserver_request_total
process_start_time_seconds
apiserver_storage_transformation_duration_seconds
apiserver_storage_transformation_operations_total" \
python3 - "$tmp/metrics.txt" "$tmp/metrics.pb" "$out" <<'PY'
import os, sys
text_path, pb_path, out = sys.argv[1:]
families = os.environ["FAMILIES"].split()

def family_of(line):
    # "# HELP name …", "# TYPE name …", or a sample "name{…} v" / "name_bucket{…} v".
    word = line.split()[2] if line.startswith("#") else line.split("{")[0].split(" ")[0]
    for family in families:
        if word == family or word in (family + "_bucket", family + "_sum", family + "_count"):
            return family
    return None

with open(text_path) as f:
    kept = [line for line in f if family_of(line)]
with open(os.path.join(out, "kube-apiserver-1.36.2-encryption.txt"), "w") as f:
    f.writelines(kept)

def varint(data, i):
    shift = value = 0
    while True:
        byte = data[i]; i += 1
        value |= (byte & 0x7F) << shift; shift += 7
        if byte < 0x80:
            return value, i

def family_name(message):
    # Field 1 (name), wire type 2: the first field kube-apiserver writes.
    i = 0
    while i < len(message):
        key, i = varint(message, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            length, i = varint(message, i)
            if field == 1:
                return message[i:i + length].decode()
            i += length
        elif wire == 0:
            _, i = varint(message, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise SystemExit(f"record-metrics: wire type {wire} in a MetricFamily")
    return ""

data = open(pb_path, "rb").read()
i, kept_pb, names = 0, b"", []
while i < len(data):
    start = i
    length, i = varint(data, i)
    message = data[i:i + length]
    i += length
    name = family_name(message)
    if name in families:
        kept_pb += data[start:i]
        names.append(name)
with open(os.path.join(out, "kube-apiserver-1.36.2-encryption.pb"), "wb") as f:
    f.write(kept_pb)
print(f"record-metrics: kept {len(kept)} text lines and {len(names)} protobuf families: {', '.join(names)}", file=sys.stderr)
PY

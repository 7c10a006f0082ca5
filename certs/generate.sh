#!/usr/bin/env bash
# Generates the development PKI into a directory (default: this one) with
# `svm-apiserver certs` (auth::devcerts::generate). A complete set already there is kept; delete
# the files to start over. See README.md for what each file is.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here}"
cd "$here/.."
exec cargo run --quiet --release -- certs --dir "$dir"

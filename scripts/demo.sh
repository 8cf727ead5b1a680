#!/usr/bin/env bash
# The demo: the classic local-PV walkthrough on a throw-away control plane, with real node agents, the extender
# and kube-scheduler using it. Builds what it needs first (the pinned Kubernetes binaries, localpv, the demo).
# Ctrl-C at any point stops everything and removes the tmpfs disks and temp files.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# shellcheck source=prereqs.sh
. scripts/prereqs.sh

echo "==> building the pinned control plane (cached after the first run)"
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/localpv/target}

echo "==> building localpv and the demo"
cargo build --quiet --bin localpv --example demo
# exec: Ctrl-C reaches the demo directly, which cleans up before it exits.
exec "$CARGO_TARGET_DIR/debug/examples/demo"

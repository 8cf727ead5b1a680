#!/usr/bin/env bash
# The demo: the classic local-PV walkthrough on two real kubelet nodes started on this machine, with the chart
# installed by helm and a real pod writing its own data. Installs and builds what it needs first (Debian packages,
# the pinned Kubernetes binaries and kubelet, localpv, the images), all cached for the next run.
# Ctrl-C at any point stops everything and undoes every change to the host (mounts, bridge, iptables chain,
# cgroups, processes, temp files).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# shellcheck source=prereqs.sh
. scripts/prereqs.sh

echo "==> building the pinned control plane and kubelet (cached after the first run)"
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/localpv/target}

echo "==> building localpv and the demo"
cargo build --quiet --bin localpv --example demo
# The image's binary: the debug build just made (as scripts/test.sh does for the real-node tier) instead of a
# release build, which costs ~22 minutes on 2 cores the first time. Set LOCALPV_REALNODE_BINARY to use another.
export LOCALPV_REALNODE_BINARY=${LOCALPV_REALNODE_BINARY:-$CARGO_TARGET_DIR/debug/localpv}
# exec: Ctrl-C reaches the demo directly, which cleans up before it exits.
exec "$CARGO_TARGET_DIR/debug/examples/demo"

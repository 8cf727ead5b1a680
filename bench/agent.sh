#!/usr/bin/env bash
# Node agent benchmarks on the real control plane (see benches/agent.rs). Needs root (tmpfs mounts) and the
# control-plane binaries (scripts/k8s-bins.sh). Sizes: LOCALPV_BENCH_MOUNTS, _DISKS, _OTHER_PVS, _STEADY_SECS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), $(date -u +%F)"
cargo bench --bench agent 2>/dev/null

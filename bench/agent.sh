#!/usr/bin/env bash
# Node agent benchmarks on the real control plane (see benches/agent.rs): mount-to-PV latency one by one and in a
# burst, time to publish the disks present at start, Released-to-Available for a volume full of small files,
# resident memory at 1/10 and all of the cluster's PVs, and requests at steady state by verb from the audit log.
# Needs root (tmpfs mounts) and the control-plane binaries (scripts/k8s-bins.sh). Sizes (defaults):
# LOCALPV_BENCH_REPEATS (3), _MOUNTS (100), _DISKS (1000), _OTHER_PVS (10000), _OWN_DISKS (100),
# _WIPE_FILES (100000), _STEADY_SECS (300); LOCALPV_BENCH_FIGURES names a file that gets the headline figures
# as JSON lines. At defaults it takes some 12 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), $(date -u +%F)"
echo "command: bench/agent.sh"
cargo bench --bench agent 2>/dev/null

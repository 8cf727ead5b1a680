#!/usr/bin/env bash
# Fleet simulation (see benches/fleet.rs): 200 stand-in nodes, each with its own node agent and a few tmpfs disks,
# against one API server; then the same with the reference provisioner (sig-storage-local-static-provisioner,
# built offline from ../shared/peers by bench/peers.sh). Measures the API server's CPU and memory and its
# requests per second by verb, at steady state and during a rolling restart of every agent, extrapolated per
# 1,000 nodes. Prints markdown on stdout; LOCALPV_BENCH_FIGURES names a file that gets the figures as JSON lines.
# Needs root (tmpfs mounts, mount namespaces) and the control-plane binaries (scripts/k8s-bins.sh).
# Sizes (defaults): LOCALPV_FLEET_NODES (200), _DISKS (3), _STEADY_SECS (300), _BASELINE_SECS (60),
# _SAMPLE_SECS (10), _BATCH (10), _KINDS (localpv,reference). At defaults it takes some 40 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
if [[ ",${LOCALPV_FLEET_KINDS:-localpv,reference}," == *",reference,"* ]]; then
  if [ -z "${LOCALPV_FLEET_LSP:-}" ]; then
    grep -q 'build-lsp' bench/peers.sh || {
      echo "bench/fleet.sh: bench/peers.sh cannot build the reference provisioner (no build-lsp); set LOCALPV_FLEET_LSP" >&2
      exit 1
    }
    LOCALPV_FLEET_LSP=$(bench/peers.sh build-lsp)
  fi
  export LOCALPV_FLEET_LSP
fi
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), $(date -u +%F)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/fleet.sh"
cargo bench --bench fleet

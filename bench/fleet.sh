#!/usr/bin/env bash
# Fleet simulation (see benches/fleet.rs): 200 stand-in nodes, each with its own node agent and a few tmpfs disks,
# against one API server that also holds 20,000 PVs of nodes without an agent: localpv watching every PV, localpv
# under the chart's admission policy (each agent watching its own node's PVs), then the reference provisioner
# (sig-storage-local-static-provisioner, built offline from ../shared/peers by bench/peers.sh). Measures the API
# server's CPU and memory, its requests per second by verb and the bytes it sends, at steady state, while PVs
# elsewhere are created and deleted, and during a rolling restart of every agent, extrapolated per 1,000 nodes.
# Prints markdown on stdout; LOCALPV_BENCH_FIGURES names a file that gets the figures as JSON lines.
# Needs root (tmpfs mounts, mount namespaces) and the control-plane binaries (scripts/k8s-bins.sh).
# Sizes (defaults): LOCALPV_FLEET_NODES (200), _DISKS (3), _STEADY_SECS (300), _BASELINE_SECS (60),
# _SAMPLE_SECS (10), _BATCH (10), _FOREIGN_PVS (20000), _CHURN_RATE (20/s), _CHURN_SECS (60),
# _KINDS (localpv,localpv-narrow,reference). At defaults it takes about an hour on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
if [[ ",${LOCALPV_FLEET_KINDS:-localpv,localpv-narrow,reference}," == *",reference,"* ]]; then
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

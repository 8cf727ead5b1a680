#!/usr/bin/env bash
# Node agent benchmarks on the real control plane, side by side with the reference provisioner (see
# benches/agent.rs): mount-to-PV one by one and in a burst, disks present at start, restart to ready, resident
# memory, requests at steady state by verb from the audit log, Released to Available with many files, a bind mount
# inside a released volume, and localpv's discovery cost per event at several disk counts.
# Needs root (tmpfs mounts, mount namespaces), Go (the reference provisioner is built from ../shared/peers by
# bench/peers.sh build-lsp, cached outside the repository) and the control-plane binaries (scripts/k8s-bins.sh).
# Sizes: the LOCALPV_BENCH_* knobs that benches/agent.rs documents; LOCALPV_BENCH_FIGURES names a file that gets
# the headline figures as JSON lines. At defaults it takes some 35 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
LOCALPV_BENCH_LSP=$(bench/peers.sh build-lsp)
export LOCALPV_K8S_BIN_DIR LOCALPV_BENCH_LSP
command -v unshare >/dev/null || { echo "bench/agent.sh: 'unshare' (util-linux) is missing" >&2; exit 1; }
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), $(date -u +%F)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/agent.sh (reference provisioner: $(basename "$(dirname "$LOCALPV_BENCH_LSP")" | cut -c1-12)...," \
  "built from $(bench/peers.sh | python3 -c 'import json, sys
for l in sys.stdin:
    p = json.loads(l)
    if p["peer"] == "sig-storage-local-static-provisioner": print(p["tarball"])'))"
echo
cargo bench --quiet --bench agent --no-run
cargo bench --quiet --bench agent

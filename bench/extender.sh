#!/usr/bin/env bash
# Benchmarks the scheduler extender in release (not timed tests) and prints markdown tables.
#
# 1. In process (benches/extender.rs, no cluster): filter and prioritize latency (pure decision and HTTP handler)
#    at 100, 1,000 and 5,000 nodes in both nodeCacheCapable modes, requests per second under concurrent load,
#    decoding a 5,000-Node request, snapshot rebuilds, and memory with 100k PVs and 50k PVCs.
#    Knobs: LOCALPV_BENCH_SCALE=1.0 (iteration counts), LOCALPV_BENCH_LOAD_SECS=3,
#    LOCALPV_BENCH_ONLY=memory,rebuild,decoding,latency,throughput (all when unset).
# 2. As running processes on the test harness's control plane (benches/extender_live/): localpv as deployed
#    against TopoLVM's and open-local's extenders on identical bodies at 100, 1,000 and 5,000 nodes, and
#    localpv's memory and tails with the Lease holder's work running at 5,000 nodes and 50,000 PVs. Builds the
#    peers first (bench/peer-bins.sh, cached by tarball hash). Knobs: LOCALPV_BENCH_EXT_NODES=5000,
#    LOCALPV_BENCH_CELL_SECS=30, LOCALPV_BENCH_IDLE_SECS=20 (see benches/extender_live/main.rs);
#    LOCALPV_BENCH_EXT_PARTS="inprocess live" picks the parts (both when unset).
#
# LOCALPV_BENCH_FIGURES=FILE appends the headline figures to FILE as JSON lines (benches/common/figures.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

parts=${LOCALPV_BENCH_EXT_PARTS:-inprocess live}
for part in $parts; do
  case $part in inprocess | live) ;; *) echo "bench/extender.sh: unknown part '$part' (inprocess, live)" >&2; exit 1 ;; esac
done
wanted() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if wanted live; then
  LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
  export LOCALPV_K8S_BIN_DIR
  peers=$(bench/peer-bins.sh topolvm-scheduler open-local)
  LOCALPV_BENCH_TOPOLVM_BIN=$(sed -n 's/^topolvm-scheduler=//p' <<<"$peers")
  LOCALPV_BENCH_OPEN_LOCAL_BIN=$(sed -n 's/^open-local=//p' <<<"$peers")
  export LOCALPV_BENCH_TOPOLVM_BIN LOCALPV_BENCH_OPEN_LOCAL_BIN
fi
cargo bench --quiet --bench extender --bench extender_live --no-run
# The machine is shared: its load average goes on the page, before and after.
echo "Ran on $(uname -srm), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); load average $(cut -d' ' -f1-3 /proc/loadavg) before."
echo
if wanted inprocess; then
  cargo bench --quiet --bench extender
fi
if wanted live; then
  echo "Peers built from: $(cat "$(dirname "$LOCALPV_BENCH_TOPOLVM_BIN")/SOURCE"), $(cat "$(dirname "$LOCALPV_BENCH_OPEN_LOCAL_BIN")/SOURCE")."
  echo
  cargo bench --quiet --bench extender_live
  echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)."
fi

#!/usr/bin/env bash
# Benchmarks the scheduler extender in release (not timed tests) and prints markdown tables: filter and prioritize
# latency (pure decision and HTTP handler) at 100, 1,000 and 5,000 nodes in both nodeCacheCapable modes, requests
# per second under concurrent load, decoding a 5,000-Node request, and memory with 100k PVs and 50k PVCs.
# No cluster needed. Knobs (env): LOCALPV_BENCH_SCALE=1.0 (iteration counts), LOCALPV_BENCH_LOAD_SECS=3,
# LOCALPV_BENCH_ONLY=memory,rebuild,decoding,latency,throughput (all when unset); LOCALPV_BENCH_FIGURES=FILE appends the
# headline figures to FILE as JSON lines (see benches/extender.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo bench --quiet --bench extender --no-run
echo "<!-- $(uname -srm), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ) -->"
echo
cargo bench --quiet --bench extender

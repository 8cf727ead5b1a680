#!/usr/bin/env bash
# kube-scheduler throughput with delayed local claims, in-tree rules only vs with the localpv extender in both
# nodeCacheCapable modes, on the test harness's real control plane (see benches/scheduler.rs). Prints markdown
# tables; with LOCALPV_BENCH_FIGURES=<file> also appends the headline figures as JSON lines.
# Needs the control-plane binaries (scripts/k8s-bins.sh). Knobs (env): LOCALPV_BENCH_PODS=1000,
# LOCALPV_BENCH_NODES=100, LOCALPV_BENCH_REPEATS=3. A full run takes about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
cargo bench --quiet --bench scheduler --no-run
echo "<!-- $(uname -srm), $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ) -->"
echo
# Progress lines go to stderr; the tables to stdout.
cargo bench --quiet --bench scheduler

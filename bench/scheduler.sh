#!/usr/bin/env bash
# kube-scheduler throughput with delayed local claims, in-tree rules only vs a no-op extender (the protocol floor)
# vs the localpv extender, each extender in both nodeCacheCapable modes, on the test harness's real control plane
# (see benches/scheduler.rs): one kube-scheduler per mode on one plane per round, the modes taking turns batch by
# batch so that every mode meets the same machine. Prints markdown tables; with LOCALPV_BENCH_FIGURES=<file> also
# appends the headline figures as JSON lines.
# Needs the control-plane binaries (scripts/k8s-bins.sh). Knobs (env): LOCALPV_BENCH_PODS=200 (per mode and round),
# LOCALPV_BENCH_NODES=100, LOCALPV_BENCH_REPEATS=3, LOCALPV_BENCH_BATCH=10, LOCALPV_BENCH_MODES (all five when
# unset). A round of the five modes takes about 12 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR
cargo bench --quiet --bench scheduler --no-run
# The machine is shared: its load average goes on the page, before and after.
echo "Ran on $(uname -srm), $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB, $(date -u +%Y-%m-%dT%H:%MZ); load average $(cut -d' ' -f1-3 /proc/loadavg) before."
echo
# Progress lines go to stderr; the tables to stdout.
cargo bench --quiet --bench scheduler
echo
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)."

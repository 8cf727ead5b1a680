#!/usr/bin/env bash
# Time to handle a failing disk (issue 37), on two real nodes: the real-node test tests/realnode/recovery.rs puts xfs
# on a loop device whose FUSE-served backing file starts returning EIO under a 3-replica StatefulSet, and prints
#  - first EIO -> the disk's LocalDisk says Failed (the agent's health check every 15 s, the defaults), and
#  - recovery opted in, on a disk already Failed -> the replica Running again, empty, on a free disk of another node
#    (the extender's Lease holder deletes claim and pod; the StatefulSet makes a new claim; scheduler, kubelet).
# REPS runs (LOCALPV_BENCH_FAILURE_REPEATS, default 3); median and spread. No peer does either step: with the
# reference provisioner, sig-storage-local-static-provisioner, an operator notices and deletes claim and pod.
# Uses the debug build, as the test tier does (the figures are waits, not CPU). Prints markdown; with
# LOCALPV_BENCH_FIGURES set, appends headline figures there (bench/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${LOCALPV_BENCH_FAILURE_REPEATS:-3}
cargo build --quiet --bin localpv
BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/localpv
LOG=$(mktemp /tmp/failure-bench.XXXXXX)
trap 'rm -f "$LOG"' EXIT

failed=()
running=()
for i in $(seq "$REPS"); do
  if ! LOCALPV_REALNODE_BINARY=$BIN cargo test --quiet --test realnode recovery:: -- --nocapture --test-threads=1 \
    >"$LOG" 2>&1; then
    echo "bench/failure.sh: run $i failed; last lines:" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
  line=$(grep -o 'recovery timings: .*' "$LOG" | head -n 1)
  failed+=("$(sed -E 's/.*Failed ([0-9.]+)s;.*/\1/' <<<"$line")")
  running+=("$(sed -E 's/.*new disk ([0-9.]+)s.*/\1/' <<<"$line")")
  echo "run $i: $line" >&2
done

# stats v1 v2 ... -> "median min max n"
stats() {
  printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f %.1f %d", m, v[1], v[NR], NR }'
}
figure() {
  [ -n "${LOCALPV_BENCH_FIGURES:-}" ] || return 0
  printf '{"key":"%s","label":"%s","unit":"%s","median":%s,"min":%s,"max":%s,"n":%s}\n' "$@" >>"$LOCALPV_BENCH_FIGURES"
}
read -r fm fmin fmax fn <<<"$(stats "${failed[@]}")"
read -r rm rmin rmax rn <<<"$(stats "${running[@]}")"
figure failure.eio_to_failed "first EIO to LocalDisk Failed" s "$fm" "$fmin" "$fmax" "$fn"
figure failure.recovery_to_running "recovery to replica Running on a new disk" s "$rm" "$rmin" "$rmax" "$rn"

echo "| step | localpv | reference provisioner | runs |"
echo "| --- | --- | --- | --- |"
echo "| first EIO on the disk under a Bound PV to its LocalDisk \`Failed\` (xfs on a failing loop device; health check every 15 s, \`Failed\` after 3 errors or a shut-down filesystem) | $fm s ($fmin-$fmax) | not detected | $fn |"
echo "| recovery opted in (the disk already \`Failed\`) to the replica Running again, empty, on a free disk of another node | $rm s ($rmin-$rmax) | by hand: an operator deletes the claim and the pod | $rn |"

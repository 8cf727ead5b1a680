#!/usr/bin/env bash
# The one benchmark command (issues 8 and 18): builds what it needs (localpv, and the peers from the source
# tarballs in ../shared/peers), runs every benchmark on the test harness's real control plane and real disks, and
# regenerates docs/benchmarks.md from what they print (never edit that page by hand). Run it as root from a clone
# where the README's test command has run once (Kubernetes binaries cached).
#
#   bench/run.sh                 everything at the sizes the issues name (about two hours on 2 cores)
#   LOCALPV_BENCH_QUICK=1 bench/run.sh   small sizes, for checking the pipeline (writes to $LOCALPV_BENCH_OUT only)
#   LOCALPV_BENCH_PARTS="agent" bench/run.sh   reruns only the named parts (peers agent scheduler extender wipe
#                                failure fleet) and keeps the others from bench/results; the page marks what was rerun,
#                                when, at which commit and with which command
#   LOCALPV_BENCH_PARTS=fleet LOCALPV_BENCH_IMPORT_FLEET=DIR bench/run.sh   takes the fleet part from a run of
#                                bench/fleet.sh kept in DIR (fleet.md, figures.jsonl) instead of running it (40 min)
#
# Order: peers (their commits; the reference provisioner is built before any part), node agent against the
# reference provisioner, scheduler throughput, extender, wipe, failure and recovery on real nodes, fleet. Each benchmark's markdown goes to
# $OUT/<name>.md, its log to $OUT/<name>.log, its headline figures to $OUT/figures.jsonl; bench/report.py
# assembles the page (summary with ratios and targets first, then every absolute figure with its command).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The caller's knobs, before this script sets its defaults (see the command recorded below).
user_knobs=$(env | grep -E '^LOCALPV_BENCH_[A-Z_]+=' |
  grep -Ev '^LOCALPV_BENCH_(FIGURES|OUT|PARTS|QUICK|IMPORT_FLEET)=' | sort -r || true)

[ "$(id -u)" = 0 ] || { echo "bench/run.sh: needs root (tmpfs mounts, loop devices)" >&2; exit 1; }
for tool in go python3 cargo bc losetup mkfs.ext4; do
  command -v "$tool" >/dev/null || { echo "bench/run.sh: '$tool' is missing; run scripts/prereqs.sh" >&2; exit 1; }
done

ALL_PARTS="peers agent scheduler extender wipe failure fleet"
PARTS=${LOCALPV_BENCH_PARTS:-$ALL_PARTS}
for part in $PARTS; do
  case " $ALL_PARTS " in *" $part "*) ;; *) echo "bench/run.sh: LOCALPV_BENCH_PARTS: unknown part '$part' (parts: $ALL_PARTS)" >&2; exit 1 ;; esac
done
partial=0
[ "$PARTS" = "$ALL_PARTS" ] || partial=1
if [ "$partial" = 1 ] && [ ! -f bench/results/machine.env ]; then
  echo "bench/run.sh: LOCALPV_BENCH_PARTS needs a recorded full run in bench/results; run bench/run.sh first" >&2
  exit 1
fi
wanted() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

OUT=${LOCALPV_BENCH_OUT:-$(mktemp -d /tmp/localpv-bench.XXXXXX)}
mkdir -p "$OUT"
export LOCALPV_BENCH_FIGURES=$OUT/figures.jsonl
: >"$LOCALPV_BENCH_FIGURES"
if [ "$partial" = 1 ]; then
  # Keep the recorded run's inputs, minus the figures of the parts measured again.
  cp bench/results/* "$OUT/"
  keep='^\{"key": ?"('$(echo "$PARTS" | sed 's/ /|/g')')\.'
  grep -Ev "$keep" bench/results/figures.jsonl >"$LOCALPV_BENCH_FIGURES" || true
fi
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR

if [ "${LOCALPV_BENCH_QUICK:-0}" = 1 ]; then
  export LOCALPV_BENCH_MOUNTS=10 LOCALPV_BENCH_DISKS=50 LOCALPV_BENCH_OTHER_PVS=500 LOCALPV_BENCH_STEADY_SECS=10
  export LOCALPV_BENCH_LSP_MOUNTS=3 LOCALPV_BENCH_OWN_DISKS=5 LOCALPV_BENCH_COST_SIZES=10,50 LOCALPV_BENCH_COST_MOUNTS=3
  export LOCALPV_BENCH_WIPE_FILES=1000,5000 LOCALPV_BENCH_REPEATS=1 LOCALPV_BENCH_PODS=20 LOCALPV_BENCH_NODES=10
  export LOCALPV_BENCH_SCALE=0.05 LOCALPV_BENCH_LOAD_SECS=1
  export SIZES=5000 EXT4_SIZES=5000 REPS=1 BLOCK_MIB=64
fi
# The wipe comparison at the sizes issue 4 names; ext4 on a loop device only at 100k files (1M there adds ~15 min).
export REPS=${REPS:-3} EXT4=${EXT4:-1} EXT4_SIZES=${EXT4_SIZES:-100000}
export LOCALPV_BENCH_SCHED_REPEATS=${LOCALPV_BENCH_SCHED_REPEATS:-3}
env | grep -E '^(LOCALPV_BENCH_[A-Z_]+|SIZES|EXT4|EXT4_SIZES|REPS|PER_DIR|CONCURRENCY|BLOCK_MIB|BLOCK_DIR)=' |
  grep -v '^LOCALPV_BENCH_\(FIGURES\|OUT\)=' | sort >"$OUT/knobs.env" || true

started=$(date -u +%FT%TZ)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benches bench || echo ' (with local changes)')"
command="bench/run.sh"
[ "$partial" = 0 ] || command="LOCALPV_BENCH_PARTS=\"$PARTS\" bench/run.sh"
[ -z "${LOCALPV_BENCH_IMPORT_FLEET:-}" ] || command="LOCALPV_BENCH_IMPORT_FLEET=$LOCALPV_BENCH_IMPORT_FLEET $command"
[ "${LOCALPV_BENCH_QUICK:-0}" = 0 ] || command="LOCALPV_BENCH_QUICK=1 $command"
# Every other knob the caller set is part of the command, so the page says how it was measured.
for knob in $user_knobs; do
  command="$knob $command"
done
[ "$partial" = 1 ] || {
  echo "started=$started"
  echo "command=$command"
  echo "commit=$commit"
  echo "cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "cores=$(nproc)"
  echo "memory_gib=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)"
  echo "kernel=$(uname -sr)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "rustc=$(rustc --version)"
  echo "go=$(go version | cut -d' ' -f3)"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
  grep -E '^(K8S_VERSION|ETCD_VERSION)=' scripts/versions.env
} >"$OUT/machine.env"

# Nothing to build when the only part is an imported one, or the failure part (it uses the debug build).
if { [ "$PARTS" != fleet ] || [ -z "${LOCALPV_BENCH_IMPORT_FLEET:-}" ]; } && [ "$PARTS" != failure ]; then
  cargo build --release --quiet --bin localpv
fi
# The reference provisioner, built offline from its tarball (cached by the tarball's hash): the agent part runs it.
LOCALPV_BENCH_LSP=$(bench/peers.sh build-lsp)
export LOCALPV_BENCH_LSP

run() {
  local name=$1 t0
  shift
  wanted "$name" || return 0
  if [ "$partial" = 1 ]; then
    # NB: a part's earlier run leaves its lines in machine.env; the later ones win when report.py reads it.
    echo "${name}_rerun=$started at commit $commit" >>"$OUT/machine.env"
    echo "${name}_command=$command" >>"$OUT/machine.env"
  fi
  echo "${name}_load=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.env"
  t0=$(date +%s)
  echo "== $name: $* (log: $OUT/$name.log)" >&2
  if ! "$@" >"$OUT/$name.md" 2>"$OUT/$name.log"; then
    echo "bench/run.sh: $name failed; last lines of $OUT/$name.log:" >&2
    tail -n 30 "$OUT/$name.log" >&2
    exit 1
  fi
  echo "${name}_seconds=$(($(date +%s) - t0))" >>"$OUT/machine.env"
}

run peers bench/peers.sh
! wanted peers || mv "$OUT/peers.md" "$OUT/peers.jsonl"
run agent bench/agent.sh
# Three rounds by default: a round (200 pods per mode, the five modes taking turns on one plane) takes about 12
# minutes on 2 cores (kube-scheduler's in-tree VolumeBinding filter is CPU-bound).
run scheduler env LOCALPV_BENCH_REPEATS="${LOCALPV_BENCH_SCHED_REPEATS:-3}" bench/scheduler.sh
run extender bench/extender.sh
run wipe bench/wipe.sh
run failure bench/failure.sh
if [ -n "${LOCALPV_BENCH_IMPORT_FLEET:-}" ] && wanted fleet; then
  from=$LOCALPV_BENCH_IMPORT_FLEET
  for f in fleet.md figures.jsonl; do
    [ -f "$from/$f" ] || { echo "bench/run.sh: LOCALPV_BENCH_IMPORT_FLEET: $from/$f is missing" >&2; exit 1; }
  done
  cp "$from/fleet.md" "$OUT/fleet.md"
  grep -E '^\{"key": ?"fleet\.' "$from/figures.jsonl" >>"$LOCALPV_BENCH_FIGURES"
  echo "fleet_rerun=$(date -u -r "$from/fleet.md" +%FT%TZ) by bench/fleet.sh, imported from $from" >>"$OUT/machine.env"
  echo "fleet_command=$command" >>"$OUT/machine.env"
else
  [ -x bench/fleet.sh ] || ! wanted fleet || { echo "bench/run.sh: bench/fleet.sh is missing (part fleet)" >&2; exit 1; }
  run fleet bench/fleet.sh
fi
if [ "$partial" = 0 ]; then
  echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.env"
  echo "finished=$(date -u +%FT%TZ)" >>"$OUT/machine.env"
fi

if [ "${LOCALPV_BENCH_QUICK:-0}" = 1 ]; then
  python3 bench/report.py "$OUT" >"$OUT/benchmarks.md"
  echo "quick run: report in $OUT/benchmarks.md (docs/benchmarks.md left alone)" >&2
else
  # Keep the page's inputs beside it: a test re-renders docs/benchmarks.md from bench/results and compares, so
  # the page cannot drift from what this command measured.
  # A partial rerun keeps the full run's knobs (its parts ran with the defaults above).
  [ "$partial" = 0 ] || cp bench/results/knobs.env "$OUT/knobs.env"
  rm -rf bench/results && mkdir -p bench/results
  cp "$OUT"/{machine.env,knobs.env,peers.jsonl,figures.jsonl} bench/results/
  for part in $ALL_PARTS; do
    [ ! -f "$OUT/$part.md" ] || [ "$part" = peers ] || cp "$OUT/$part.md" bench/results/
  done
  python3 bench/report.py bench/results >docs/benchmarks.md
  echo "wrote docs/benchmarks.md and bench/results/ (logs in $OUT)" >&2
fi

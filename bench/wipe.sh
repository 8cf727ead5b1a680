#!/usr/bin/env bash
# Benchmarks the wipe engine (run as root):
#  - filesystem: our in-process wipe vs `rm -rf --one-file-system` on identical trees of small files on tmpfs
#    (and on an ext4 loop device with EXT4=1), REPS runs each, median and spread (min..max) of wall seconds;
#  - block: throughput of each method on a loop device over a sparse file.
# Prints markdown tables; with LOCALPV_BENCH_FIGURES set, appends headline figures there (bench/run.sh).
# Knobs (env): SIZES="100000 1000000" REPS=5 PER_DIR=1000 CONCURRENCY="1 2" EXT4=0 EXT4_SIZES=$SIZES BLOCK_MIB=2048
# BLOCK_DIR=/var/tmp
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"100000 1000000"}
REPS=${REPS:-5}
PER_DIR=${PER_DIR:-1000}
CONCURRENCY=${CONCURRENCY:-"1 2"}
EXT4=${EXT4:-0}
EXT4_SIZES=${EXT4_SIZES:-$SIZES}
BLOCK_MIB=${BLOCK_MIB:-2048}
BLOCK_DIR=${BLOCK_DIR:-/var/tmp}

cargo build --quiet --release --example wipe_bench
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/wipe_bench

WORK=$(mktemp -d /tmp/wipe-bench.XXXXXX)
MOUNTS=()
LOOPS=()
cleanup() {
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[$i]}" || true; done
  for dev in "${LOOPS[@]}"; do losetup -d "$dev" || true; done
  rm -rf "$WORK" "$BLOCK_DIR"/wipe-bench-*.img
}
trap cleanup EXIT

now() { date +%s.%N; }

# median, min and max of the numbers on stdin, as "median min max n"
stats() {
  sort -g | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f %d\n", m, v[1], v[NR], NR }'
}

# figure <key> <label> <unit> <median> <min> <max> <n>: one JSON line for bench/report.py
figure() {
  [ -n "${LOCALPV_BENCH_FIGURES:-}" ] || return 0
  printf '{"key":"%s","label":"%s","unit":"%s","median":%s,"min":%s,"max":%s,"n":%s}\n' "$@" >>"$LOCALPV_BENCH_FIGURES"
}

# cell <median> <min> <max>: "0.408 s (0.343-0.566)"
cell() { printf '%s s (%s-%s)' "$1" "$2" "$3"; }

# bench_fs <label> <key> <mountpoint>: one table row per tree size
bench_fs() {
  local label=$1 fskey=$2 mnt=$3 n c rep t0 t1 key row ours rm verdict
  for n in $SIZES; do
    declare -A times=()
    for rep in $(seq "$REPS"); do
      # Alternate ours and rm -rf within each repetition so machine drift hits both.
      for c in $CONCURRENCY; do
        mkdir -p "$mnt/vol"
        "$BIN" tree "$mnt/vol" "$n" "$PER_DIR"
        sync
        t0=$(now); "$BIN" fs "$mnt/vol" "$c" >/dev/null; t1=$(now)
        times[ours-c$c]+="$(echo "$t1 - $t0" | bc) "
        [ -z "$(ls -A "$mnt/vol")" ] || { echo "wipe left entries in $mnt/vol" >&2; exit 1; }
      done
      mkdir -p "$mnt/vol/tree"
      "$BIN" tree "$mnt/vol/tree" "$n" "$PER_DIR"
      sync
      t0=$(now); rm -rf --one-file-system "$mnt/vol/tree"; t1=$(now)
      times[rm-rf]+="$(echo "$t1 - $t0" | bc) "
    done
    row="| $label | $n |"
    for c in $CONCURRENCY; do
      read -r med lo hi cnt < <(tr ' ' '\n' <<<"${times[ours-c$c]}" | grep . | stats)
      row+=" $(cell "$med" "$lo" "$hi") |"
      figure "wipe.fs.$fskey.$n.localpv_c$c" "$label, $n files: localpv wipe, $c worker(s)" s "$med" "$lo" "$hi" "$cnt"
      ours=$med
    done
    read -r med lo hi cnt < <(tr ' ' '\n' <<<"${times[rm-rf]}" | grep . | stats)
    figure "wipe.fs.$fskey.$n.rm_rf" "$label, $n files: rm -rf --one-file-system" s "$med" "$lo" "$hi" "$cnt"
    rm=$med
    verdict=$(awk -v a="$ours" -v b="$rm" 'BEGIN { print (a <= b) ? "pass" : "**missed**" }')
    echo "$row $(cell "$med" "$lo" "$hi") | $verdict |"
    unset times
  done
}

header="| filesystem | files |"
for c in $CONCURRENCY; do header+=" localpv, $c worker(s) |"; done
echo "Filesystem wipe against \`rm -rf --one-file-system\` on an identical tree ($PER_DIR files per directory),"
echo "$REPS runs each, median (min-max). The last column compares localpv with $(echo "$CONCURRENCY" | awk '{print $NF}') worker(s) (the default is 2)."
echo
echo "$header \`rm -rf --one-file-system\` | at least as fast |"
echo "|$(printf ' --- |%.0s' $(seq $((4 + $(wc -w <<<"$CONCURRENCY")))))"
mkdir -p "$WORK/tmpfs"
mount -t tmpfs -o size=16g,nr_inodes=8m tmpfs "$WORK/tmpfs"; MOUNTS+=("$WORK/tmpfs")
bench_fs tmpfs tmpfs "$WORK/tmpfs"

if [ "$EXT4" = 1 ]; then
  truncate -s 16G "$BLOCK_DIR/wipe-bench-ext4.img"
  dev=$(losetup --find --show "$BLOCK_DIR/wipe-bench-ext4.img"); LOOPS+=("$dev")
  mkfs.ext4 -q -F "$dev"
  mkdir -p "$WORK/ext4"; mount "$dev" "$WORK/ext4"; MOUNTS+=("$WORK/ext4")
  rmdir "$WORK/ext4/lost+found"
  SIZES=$EXT4_SIZES bench_fs "ext4 (loop)" ext4 "$WORK/ext4"
fi

echo
echo "Block wipe of a ${BLOCK_MIB} MiB loop device over a sparse file in $BLOCK_DIR ($(df -T "$BLOCK_DIR" | awk 'NR==2 {print $2}')),"
echo "first quarter filled with random data. Loop devices turn \`zeroout\` and \`discard\` into hole punching in the"
echo "backing file, so those two say nothing about real disks; \`overwrite\` is bound by the backing filesystem."
echo
echo "| method | time | throughput |"
echo "| --- | --- | --- |"
img="$BLOCK_DIR/wipe-bench-block.img"
for method in zeroout discard secure-discard signatures overwrite; do
  rm -f "$img"; truncate -s "${BLOCK_MIB}M" "$img"
  dev=$(losetup --find --show "$img"); LOOPS+=("$dev")
  # Give every method real data to erase: the first quarter of the device written with non-zero bytes.
  dd if=/dev/urandom of="$dev" bs=4M count=$((BLOCK_MIB / 16)) oflag=direct status=none
  if out=$(RUST_BACKTRACE=0 "$BIN" block "$dev" "$method" 2>&1); then
    secs=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$out" | tail -1)
    rate=$(sed -n 's/.*mib_per_sec=\([0-9]*\).*/\1/p' <<<"$out" | tail -1)
    echo "| \`$method\` | $secs s | $rate MiB/s |"
    figure "wipe.block.$method" "block wipe, $method, ${BLOCK_MIB} MiB loop device" s "$secs" "$secs" "$secs" 1
  else
    echo "| \`$method\` | - | failed: $(tail -1 <<<"$out" | tr '|' '/' | xargs) |"
  fi
  losetup -d "$dev"; unset 'LOOPS[-1]'
done

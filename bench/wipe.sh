#!/usr/bin/env bash
# Benchmarks the wipe engine (run as root):
#  - filesystem: our in-process wipe vs `rm -rf --one-file-system` on identical trees of small files on tmpfs
#    (and on an ext4 loop device with EXT4=1), REPS runs each, median and spread (min..max) of wall seconds;
#  - block: throughput of each method on a loop device over a sparse file.
# Knobs (env): SIZES="100000 1000000" REPS=5 PER_DIR=1000 CONCURRENCY="1 2" EXT4=0 BLOCK_MIB=2048 BLOCK_DIR=/var/tmp
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"100000 1000000"}
REPS=${REPS:-5}
PER_DIR=${PER_DIR:-1000}
CONCURRENCY=${CONCURRENCY:-"1 2"}
EXT4=${EXT4:-0}
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

# median and spread of the numbers on stdin
stats() {
  sort -g | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median=%.3fs min=%.3fs max=%.3fs n=%d", m, v[1], v[NR], NR }'
}

# bench_fs <label> <mountpoint>
bench_fs() {
  local label=$1 mnt=$2 n c rep t0 t1
  for n in $SIZES; do
    declare -A times=()
    for rep in $(seq "$REPS"); do
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
    for key in $(printf '%s\n' "${!times[@]}" | sort); do
      printf '%-6s files=%-8s %-8s %s\n' "$label" "$n" "$key" "$(tr ' ' '\n' <<<"${times[$key]}" | grep . | stats)"
    done
    unset times
  done
}

echo "== filesystem wipe: $(nproc) cpus, kernel $(uname -r), $REPS runs, $PER_DIR files per directory"
mkdir -p "$WORK/tmpfs"
mount -t tmpfs -o size=16g,nr_inodes=8m tmpfs "$WORK/tmpfs"; MOUNTS+=("$WORK/tmpfs")
bench_fs tmpfs "$WORK/tmpfs"

if [ "$EXT4" = 1 ]; then
  truncate -s 16G "$BLOCK_DIR/wipe-bench-ext4.img"
  dev=$(losetup --find --show "$BLOCK_DIR/wipe-bench-ext4.img"); LOOPS+=("$dev")
  mkfs.ext4 -q -F "$dev"
  mkdir -p "$WORK/ext4"; mount "$dev" "$WORK/ext4"; MOUNTS+=("$WORK/ext4")
  rmdir "$WORK/ext4/lost+found"
  bench_fs ext4 "$WORK/ext4"
fi

echo "== block wipe: loop device over a sparse ${BLOCK_MIB} MiB file in $BLOCK_DIR ($(df -T "$BLOCK_DIR" | awk 'NR==2 {print $2}'))"
img="$BLOCK_DIR/wipe-bench-block.img"
for method in zeroout discard secure-discard signatures overwrite; do
  rm -f "$img"; truncate -s "${BLOCK_MIB}M" "$img"
  dev=$(losetup --find --show "$img"); LOOPS+=("$dev")
  # Give every method real data to erase: the first quarter of the device written with non-zero bytes.
  dd if=/dev/urandom of="$dev" bs=4M count=$((BLOCK_MIB / 16)) oflag=direct status=none
  printf '%-15s ' "$method"
  RUST_BACKTRACE=0 "$BIN" block "$dev" "$method" 2>&1 | tail -1 || true
  losetup -d "$dev"; unset 'LOOPS[-1]'
done

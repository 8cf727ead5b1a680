#!/usr/bin/env bash
# Builds the peers' binaries the benchmarks run side by side with localpv, from the source tarballs kept in
# ../shared/peers/ (see its README; the Go module proxy refuses these modules by path, so they are not fetched).
#
#   bench/peer-bins.sh topolvm-scheduler open-local    prints NAME=PATH for each, building what is missing
#
# Names: topolvm-scheduler (TopoLVM's scheduler extender; its dependencies come from the Go module proxy),
# open-local (Alibaba open-local's one binary; `open-local scheduler` is its extender; vendored, offline),
# local-volume-provisioner (the reference provisioner; vendored, offline).
#
# Binaries (and what a peer needs beside them, e.g. open-local's CRDs in crds/) are cached outside the repository, keyed by the tarball's SHA-256: $LOCALPV_PEER_BIN_DIR when set,
# else $HOME/.cache/localpv/peers/<name>-<first 16 hex digits>/<name>, so a new tarball builds again and an
# unchanged one never does. Tarballs come from $LOCALPV_PEERS_DIR, else ../shared/peers beside the main clone.
# Any failure (tarball missing, build error) stops with the reason and the build's last lines: never a stale or
# partial binary.
set -euo pipefail

log() { printf 'peer-bins: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The main clone's directory, also from a git worktree (its common dir is <main>/.git).
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
main=$(cd "$repo" && cd "$(git rev-parse --git-common-dir)/.." && pwd)
peers_dir=${LOCALPV_PEERS_DIR:-$(dirname "$main")/shared/peers}
cache=${LOCALPV_PEER_BIN_DIR:-$HOME/.cache/localpv/peers}

[ "$#" -gt 0 ] || die "usage: bench/peer-bins.sh NAME... (topolvm-scheduler, open-local, local-volume-provisioner)"
[ -d "$peers_dir" ] || die "no peers' sources at $peers_dir (set LOCALPV_PEERS_DIR)"
command -v go >/dev/null || die "go is not installed (scripts/prereqs.sh)"

# name -> tarball prefix, package, go build flags, a directory of the source kept beside the binary ("-": none)
recipe() {
  case $1 in
    topolvm-scheduler) echo "topolvm- ./cmd/topolvm-scheduler -mod=mod -" ;;
    # Its CRDs (NodeLocalStorage, VolumeSnapshot*): its extender's informers wait for them.
    open-local) echo "open-local- ./cmd -mod=vendor helm/crds" ;;
    local-volume-provisioner) echo "sig-storage-local-static-provisioner- ./cmd/local-volume-provisioner -mod=vendor -" ;;
    *) return 1 ;;
  esac
}

work=""
trap 'rm -rf "$work"' EXIT

build() {
  local name=$1 r prefix pkg flags keep tarball sum dir src t0
  r=$(recipe "$name") || die "unknown peer '$name' (topolvm-scheduler, open-local, local-volume-provisioner)"
  read -r prefix pkg flags keep <<<"$r"
  # NB: exactly one tarball per peer: two would make the cache key ambiguous.
  mapfile -t found < <(find "$peers_dir" -maxdepth 1 -name "${prefix}*.tar.gz" | sort)
  [ "${#found[@]}" = 1 ] || die "expected one ${prefix}*.tar.gz in $peers_dir, found ${#found[@]}"
  tarball=${found[0]}
  sum=$(sha256sum "$tarball" | cut -c1-16)
  dir=$cache/$name-$sum
  # One build per peer at a time: a second caller waits for the first and then finds the binary cached.
  mkdir -p "$cache"
  exec {lock}>"$cache/.$name.lock"
  flock "$lock"
  if [ -x "$dir/$name" ]; then
    log "$name: cached ($dir)"
  else
    work=$(mktemp -d "${TMPDIR:-/tmp}/localpv-peer-$name.XXXXXX")
    tar -C "$work" -xzf "$tarball"
    src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
    [ -f "$src/go.mod" ] || die "$tarball has no go.mod at its top directory"
    log "$name: building $pkg from $(basename "$tarball") (log: $work/build.log)"
    t0=$SECONDS
    # NB: not "$work/$name": the source directory may carry the same name.
    mkdir -p "$work/bin"
    if ! (cd "$src" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false $flags" go build -o "$work/bin/$name" "$pkg") \
      >"$work/build.log" 2>&1; then
      tail -n 30 "$work/build.log" >&2
      die "$name: go build $pkg failed"
    fi
    mkdir -p "$dir"
    if [ "$keep" != - ]; then
      [ -d "$src/$keep" ] || die "$tarball has no $keep"
      rm -rf "${dir:?}/$(basename "$keep")" && cp -r "$src/$keep" "$dir/"
    fi
    # Atomic: a concurrent or interrupted build never leaves a half-written binary under the final name.
    mv "$work/bin/$name" "$dir/$name.tmp" && mv "$dir/$name.tmp" "$dir/$name"
    cp "$src/LICENSE" "$dir/LICENSE" 2>/dev/null || true
    echo "$(basename "$tarball") sha256:$sum" >"$dir/SOURCE"
    log "$name: built in $((SECONDS - t0)) s"
    rm -rf "$work"
  fi
  exec {lock}>&-
  echo "$name=$dir/$name"
}

for name in "$@"; do
  build "$name"
done

#!/usr/bin/env bash
# The peers issue 18 compares against, from the tarballs in ../shared/peers/ (the Go module proxy refuses them by
# path, so each is kept there as one commit's source tree; its README's table names the commit).
#
#   bench/peers.sh               one JSON line per peer tarball: {"peer", "tarball", "commit", "sha256", "what"}
#                                (bench/report.py prints them on the page: which commit each comparison ran against)
#   bench/peers.sh build-lsp     builds the reference provisioner (sig-storage-local-static-provisioner) offline
#                                from its vendored tree and prints the binary's path
#
# LOCALPV_PEERS_DIR names the tarballs' directory (default: ../shared/peers beside the clone, else
# /work/shared/peers). Binaries are cached under ~/.cache/localpv/peers/<tarball sha256>/, never in the repository:
# a tarball with other contents gets a new build, the same one is built once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

peers_dir=${LOCALPV_PEERS_DIR:-}
if [ -z "$peers_dir" ]; then
  for d in ../shared/peers /work/shared/peers; do
    [ -f "$d/README.md" ] && { peers_dir=$d; break; }
  done
fi
[ -n "$peers_dir" ] && [ -f "$peers_dir/README.md" ] || {
  echo "bench/peers.sh: the peers' tarballs are missing (looked in ../shared/peers and /work/shared/peers; set" \
    "LOCALPV_PEERS_DIR)" >&2
  exit 1
}
cache=${LOCALPV_PEERS_CACHE:-$HOME/.cache/localpv/peers}

tarball() {
  local found
  found=$(ls "$peers_dir"/"$1"-*.tar.gz 2>/dev/null | head -n 1)
  [ -n "$found" ] || { echo "bench/peers.sh: no $1-*.tar.gz in $peers_dir" >&2; exit 1; }
  echo "$found"
}

build_lsp() {
  local tar sum bin work
  tar=$(tarball sig-storage-local-static-provisioner)
  sum=$(sha256sum "$tar" | cut -d' ' -f1)
  bin=$cache/$sum/local-volume-provisioner
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null || { echo "bench/peers.sh: 'go' is missing; run scripts/prereqs.sh" >&2; exit 1; }
    work=$(mktemp -d /tmp/localpv-lsp-build.XXXXXX)
    trap 'rm -rf "$work"' RETURN
    tar -C "$work" -xzf "$tar"
    mkdir -p "$cache/$sum"
    # NB: -mod=vendor and GOPROXY=off: the build must not reach for the network (the proxy refuses the module).
    (cd "$work"/sig-storage-local-static-provisioner &&
      GOFLAGS=-mod=vendor GOPROXY=off CGO_ENABLED=0 go build -o "$bin.tmp" ./cmd/local-volume-provisioner) >&2 ||
      { echo "bench/peers.sh: building the reference provisioner from $tar failed" >&2; exit 1; }
    mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

# One line per tarball: the commit is the README table's, checked against the tarball's name.
record() {
  local tar name commit readme_commit what
  for tar in "$peers_dir"/*.tar.gz; do
    name=$(basename "$tar" .tar.gz)
    commit=${name##*-}
    readme_commit=$(awk -F'|' -v t="\`$name.tar.gz\`" '{gsub(/^ +| +$/, "", $2)} $2 == t {print $4}' \
      "$peers_dir/README.md" | sed 's/^ *//; s/ .*//')
    what=$(awk -F'|' -v t="\`$name.tar.gz\`" '{gsub(/^ +| +$/, "", $2)} $2 == t {print $3}' "$peers_dir/README.md" |
      sed 's/^ *//; s/ *$//')
    [ -z "$readme_commit" ] || [ "$readme_commit" = "$commit" ] || {
      echo "bench/peers.sh: $tar is named for commit $commit but README.md says $readme_commit" >&2
      exit 1
    }
    python3 -c 'import json, sys
print(json.dumps({"peer": sys.argv[1], "tarball": sys.argv[2], "commit": sys.argv[3], "sha256": sys.argv[4],
                  "what": sys.argv[5]}))' "${name%-*}" "$(basename "$tar")" "$commit" \
      "$(sha256sum "$tar" | cut -d' ' -f1)" "$what"
  done
}

case "${1:-}" in
  "") record ;;
  build-lsp) build_lsp ;;
  *) echo "usage: bench/peers.sh [build-lsp]" >&2; exit 2 ;;
esac

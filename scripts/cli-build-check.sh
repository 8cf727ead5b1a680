#!/usr/bin/env bash
# The CLI-only build (`cargo build --no-default-features`): `disks`, `explain`, `crd` (and the extender) without
# libblkid or libudev, as an operator builds it on a laptop. Fails when the binary links either library, lacks a
# CLI subcommand, or still has `node`. Shares $CARGO_TARGET_DIR with the default build (dependencies are the
# same artifacts), keeps the CLI binary apart, and leaves the default `localpv` binary in place for the tests.
# Then type-checks the same configuration for macOS, where operators run the CLI as a kubectl plugin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${CARGO_TARGET_DIR:-target}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { printf 'cli-build-check: %s\n' "$*" >&2; exit 1; }

cargo build --quiet --no-default-features --bin localpv
cp "$target/debug/localpv" "$out/localpv"
cargo build --quiet --bin localpv

needed=$(readelf -d "$out/localpv" | awk '/NEEDED/ { print $NF }')
printf 'CLI-only binary needs: %s\n' "$(echo $needed)"
if grep -Eq 'libblkid|libudev' <<<"$needed"; then fail "the CLI-only binary links $needed"; fi
if ldd "$out/localpv" | grep -Eq 'libblkid|libudev'; then fail "the CLI-only binary loads libblkid or libudev"; fi
help=$("$out/localpv" --help)
for sub in disks explain crd; do
  grep -Eq "^  $sub " <<<"$help" || fail "the CLI-only binary has no '$sub' subcommand"
done
if grep -Eq '^  node ' <<<"$help"; then fail "the CLI-only binary still has 'node' (it needs libblkid)"; fi
"$out/localpv" crd | grep -q 'kind: CustomResourceDefinition' || fail "'localpv crd' printed no CRD"
# The default binary is back: it has the node agent.
"$target/debug/localpv" node --help >/dev/null || fail "the default build lost 'node'"

# macOS: type-check the same configuration for x86_64-apple-darwin (see scripts/macos-check/README.md for why
# three stand-in headers are enough; nothing is linked).
rustup target list --installed | grep -qx x86_64-apple-darwin || rustup target add x86_64-apple-darwin
CC_x86_64_apple_darwin=clang \
  CFLAGS_x86_64_apple_darwin="-ffreestanding -nostdlibinc -isystem $PWD/scripts/macos-check" \
  cargo check --quiet --no-default-features --bin localpv --target x86_64-apple-darwin \
  || fail "the CLI-only configuration does not compile for macOS (x86_64-apple-darwin)"
echo "cli-build-check: ok (Linux build, and macOS type-check)"

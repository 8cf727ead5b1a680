#!/usr/bin/env bash
# The one test command: installs what is missing on a fresh machine, builds the pinned control plane, then runs
# every tier (format, lints, unit, host tests on real mounts, end-to-end tests on a real control plane).
# Fails loudly when a prerequisite cannot be had; nothing is skipped.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
step() { printf '\n==> %s\n' "$*"; }
die() { printf 'test.sh: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: the host and end-to-end tests mount tmpfs and attach loop devices"
command -v cargo >/dev/null || die "cargo is not installed (Rust toolchain needed)"
command -v go >/dev/null || die "go is not installed (needed to build the Kubernetes control plane)"

# Debian packages: build-time libraries for libblkid/libudev bindings, and the tools the tests drive.
apt_packages=(pkg-config libudev-dev libblkid-dev libclang-dev clang e2fsprogs xfsprogs util-linux mount openssl
  buildah debootstrap)
missing=()
for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi
for tool in losetup mkfs.ext4 mkfs.xfs mount umount chattr; do
  command -v "$tool" >/dev/null || die "$tool is missing after installing packages"
done
[ -e /dev/loop-control ] || die "/dev/loop-control is missing: loop devices are needed for the disk tests"

step "building the pinned control plane (cached)"
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh | tail -n 1)
export LOCALPV_K8S_BIN_DIR

# Cargo's target dir lives outside the work tree so a fresh clone (CI) reuses earlier builds on this machine.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/localpv/target}
export CARGO_TERM_COLOR=never

step "cargo fmt --check"
cargo fmt --check
step "cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings
step "cargo test (unit, host, end-to-end)"
cargo test --no-fail-fast -- --test-threads=2

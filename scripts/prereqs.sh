#!/usr/bin/env bash
# Installs what a fresh machine of this kind lacks for building and running localpv's tests and demo:
# Debian packages (libblkid/libudev bindings need their -dev packages and libclang; the disk tests need mkfs,
# losetup and chattr, and the fault tests python3-fusepy for their FUSE server; the image test needs buildah and
# debootstrap; the real-node tier runs containerd, runc, the bridge CNI plugins, iptables and a static busybox, and
# compiles its pause program with gcc; the release test (tests/realnode/release.rs) cross-builds for arm64 with
# Debian's aarch64 gcc and the arm64 libblkid/libudev from dpkg multiarch, runs a registry on loopback
# (docker-registry), inspects it with skopeo, and runs the arm64 binary under qemu-user-static). Fails loudly when
# something cannot be had.
# Sourced by scripts/test.sh and scripts/demo.sh.

prereqs_die() { printf 'prereqs: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || prereqs_die "run as root: the tests and the demo mount tmpfs and attach loop devices"
command -v cargo >/dev/null || prereqs_die "cargo is not installed (Rust toolchain needed)"
command -v go >/dev/null || prereqs_die "go is not installed (needed to build the Kubernetes control plane)"

apt_packages=(pkg-config libudev-dev libblkid-dev libclang-dev clang e2fsprogs xfsprogs util-linux mount openssl
  buildah debootstrap containerd runc containernetworking-plugins busybox-static iptables iproute2 gcc libc6-dev prometheus
  python3-fusepy gcc-aarch64-linux-gnu libc6-dev-arm64-cross libblkid-dev:arm64 libudev-dev:arm64 docker-registry
  skopeo qemu-user-static)
# NB: the :arm64 packages need arm64 as a foreign architecture of dpkg (Debian's mirrors carry it).
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64 \
  || prereqs_die "dpkg --add-architecture arm64 failed"
missing=()
for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  printf '\n==> installing Debian packages: %s\n' "${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || prereqs_die "apt-get update failed"
  apt-get install -y -qq "${missing[@]}" >/dev/null || prereqs_die "apt-get install ${missing[*]} failed"
fi
for tool in losetup mkfs.ext4 mkfs.xfs mount umount chattr buildah debootstrap containerd runc ctr iptables ip unshare gcc \
  aarch64-linux-gnu-gcc docker-registry skopeo qemu-aarch64-static; do
  command -v "$tool" >/dev/null || prereqs_die "$tool is missing after installing packages"
done
# NB: Debian installs fusepy as the module `fusepy` (`fuse` is python3-fuse's), for the system python only: a
# python3 earlier on PATH (pyenv) cannot import it, so crates/test-support/src/faulty.rs runs /usr/bin/python3.
/usr/bin/python3 -c 'import fusepy' 2>/dev/null \
  || prereqs_die "/usr/bin/python3 cannot import fusepy after installing python3-fusepy (needed by tests/faults.rs)"
[ -e /dev/fuse ] || prereqs_die "/dev/fuse is missing: the fault tests (tests/faults.rs) need FUSE"
[ -x /usr/lib/cni/bridge ] || prereqs_die "/usr/lib/cni/bridge is missing after installing containernetworking-plugins"
rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu \
  || prereqs_die "rustup target add aarch64-unknown-linux-gnu failed (the release test cross-builds for arm64)"
[ -e /dev/loop-control ] || prereqs_die "/dev/loop-control is missing: loop devices are needed for the disk tests"

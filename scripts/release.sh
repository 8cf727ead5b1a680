#!/usr/bin/env bash
# Builds and publishes one localpv release: the image for linux/amd64 and linux/arm64 as one manifest list, the
# Helm chart (same version, image pinned by digest) as an OCI artifact, `localpv` CLI archives for both Linux
# architectures (the CLI-only build, no C libraries), SHA256SUMS, an SPDX SBOM and a krew manifest for
# `kubectl localpv`. Run by .github/workflows/release.yml on a version tag, and by tests/realnode/release.rs
# against a registry on loopback.
#
#   scripts/release.sh [--profile release|dev] [--registry HOST[:PORT]/PATH] [--plain-http] [--out DIR]
#                      [--tag vX.Y.Z] [--download-url URL] [--no-push]
#
# The version is Cargo.toml's (the one place it is bumped); --tag must name it, and then CHANGELOG.md must have its
# section. Binaries are cross-built on the host (arm64 with Debian's aarch64-linux-gnu gcc and the arm64 libblkid /
# libudev from dpkg multiarch, see scripts/prereqs.sh); each image is assembled without running anything inside it
# (no emulation needed): the binary plus the shared libraries it links, taken from Debian's packages of the same
# release as the build host, and the user 65532 the extender runs as. `--profile dev` makes a debug build for CI.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

profile=release registry=ghcr.io/localpv plain_http=0 out=$root/dist tag="" push=1
download_url=""
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --release) profile=release; shift ;;
    --registry) registry=$2; shift 2 ;;
    --plain-http) plain_http=1; shift ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --download-url) download_url=$2; shift 2 ;;
    --no-push) push=0; shift ;;
    *) echo "release: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { printf 'release: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'release: %s\n' "$*" >&2; }
timed() { local what=$1 start=$SECONDS; shift; "$@"; log "$what: $((SECONDS - start))s"; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || die "no version in Cargo.toml"
chart_version=$(sed -n 's/^version: //p' charts/localpv/Chart.yaml)
[ "$chart_version" = "$version" ] || die "charts/localpv/Chart.yaml has version $chart_version, Cargo.toml $version"
if [ -n "$tag" ]; then
  [ "$tag" = "v$version" ] || die "tag $tag does not name Cargo.toml's version $version"
  grep -Eq "^## \[?$version\]?( |$)" CHANGELOG.md || die "CHANGELOG.md has no '## $version' section"
fi
download_url=${download_url:-https://github.com/localpv/localpv/releases/download/v$version}
case $profile in release) pdir=release ;; dev) pdir=debug ;; *) die "--profile is release or dev" ;; esac

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/localpv/target}
target=$CARGO_TARGET_DIR
cache=$HOME/.cache/localpv/release
mkdir -p "$out" "$cache/debs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- Binaries. NB: the node build and the CLI-only build write the same path; each is copied out at once.
arm=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# pkg-config finds the arm64 libblkid/libudev (dpkg multiarch); bindgen's clang reads the same headers.
export PKG_CONFIG_LIBDIR_aarch64_unknown_linux_gnu=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
export PKG_CONFIG_ALLOW_CROSS=1
export BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu="-I/usr/include/aarch64-linux-gnu"
build() { # arch features -> copies the binary to $work/<arch>-<kind>/localpv
  local arch=$1 kind=$2 args=(build --locked --quiet --profile "$profile" --bin localpv) from
  [ "$kind" = cli ] && args+=(--no-default-features)
  if [ "$arch" = arm64 ]; then args+=(--target $arm); from=$target/$arm/$pdir/localpv; else from=$target/$pdir/localpv; fi
  timed "cargo build $arch $kind ($profile)" cargo "${args[@]}"
  mkdir -p "$work/$arch-$kind"
  cp "$from" "$work/$arch-$kind/localpv"
}
for arch in amd64 arm64; do build $arch cli; build $arch node; done

# --- CLI archives; the krew plugin installs `localpv` as `kubectl-localpv`.
for arch in amd64 arm64; do
  tar -C "$work/$arch-cli" --owner=0 --group=0 --mtime=@0 -czf "$out/localpv-$version-linux-$arch.tar.gz" localpv
done

# --- Image root file systems: the binary, the libraries it needs from Debian's packages, passwd/group.
debs() { # arch -> unpacks libc6 libgcc-s1 libblkid1 libudev1 libcap2 for arch into $work/<arch>-root
  local arch=$1 dir=$cache/debs/$1 root=$work/$1-root
  mkdir -p "$dir" "$root"
  (cd "$dir" && ls ./*.deb >/dev/null 2>&1 || apt-get download -q \
    "libc6:$arch" "libgcc-s1:$arch" "libblkid1:$arch" "libudev1:$arch" "libcap2:$arch" >/dev/null 2>&1) \
    || die "apt-get download of the $arch runtime libraries failed (needs dpkg --add-architecture arm64)"
  for d in "$dir"/*.deb; do dpkg-deb -x "$d" "$root"; done
  rm -rf "$root/usr/share" "$root/usr/lib/"*/gconv "$root/sbin" "$root/usr/sbin" "$root/usr/bin" "$root/etc/ld.so.conf.d"
  mkdir -p "$root/etc" "$root/tmp" "$root/usr/local/bin"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nlocalpv:x:65532:65532::/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nlocalpv:x:65532:\n' >"$root/etc/group"
  install -m 0755 "$work/$arch-node/localpv" "$root/usr/local/bin/localpv"
  ln -s localpv "$root/usr/local/bin/kubectl-localpv"
}
repo=$registry/localpv
list=localhost/localpv-release:$version
buildah manifest rm "$list" >/dev/null 2>&1 || true
buildah manifest create "$list" >/dev/null
for arch in amd64 arm64; do
  debs $arch
  tar -C "$work/$arch-root" --owner=0 --group=0 -cf "$work/$arch-root.tar" .
  c=$(buildah from --arch "$arch" scratch)
  buildah add "$c" "$work/$arch-root.tar" / >/dev/null
  buildah config --arch "$arch" --os linux --user 65532:65532 --entrypoint '["/usr/local/bin/localpv"]' --cmd --help \
    --env PATH=/usr/local/bin:/usr/bin:/bin --label org.opencontainers.image.version="$version" "$c"
  image=localhost/localpv-release:$version-$arch
  buildah commit -q "$c" "$image" >/dev/null
  buildah rm "$c" >/dev/null
  buildah manifest add --arch "$arch" --os linux "$list" "containers-storage:$image" >/dev/null
done

tls=(); helm_http=()
[ $plain_http = 1 ] && tls=(--tls-verify=false) && helm_http=(--plain-http)
digest=""
if [ $push = 1 ]; then
  timed "push image $repo:$version" buildah manifest push -q "${tls[@]}" --all --digestfile "$work/digest" \
    "$list" "docker://$repo:$version"
  digest=$(cat "$work/digest")
  log "image $repo:$version@$digest"
fi

# --- Chart: same version, the pushed image pinned by digest.
cp -r charts/localpv "$work/chart"
sed -i "0,/^  repository: .*/s||  repository: $repo|; 0,/^  tag: .*/s||  tag: \"$version\"|" "$work/chart/values.yaml"
[ -n "$digest" ] && sed -i "0,/^  digest: .*/s||  digest: \"$digest\"|" "$work/chart/values.yaml"
helm=${HELM:-helm}
"$helm" package --version "$version" --app-version "$version" -d "$out" "$work/chart" >/dev/null
if [ $push = 1 ]; then
  timed "push chart" "$helm" push "${helm_http[@]}" "$out/localpv-$version.tgz" "oci://$registry/charts" >&2
fi

# --- Checksums, SBOM, krew manifest.
(cd "$out" && sha256sum "localpv-$version-linux-amd64.tar.gz" "localpv-$version-linux-arm64.tar.gz" \
  "localpv-$version.tgz" >SHA256SUMS)
cargo metadata --locked --format-version 1 | python3 scripts/sbom.py "$version" >"$out/localpv-$version.spdx.json"
sum() { sha256sum "$out/localpv-$version-linux-$1.tar.gz" | cut -d' ' -f1; }
cat >"$out/localpv.yaml" <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: localpv
spec:
  version: v$version
  homepage: https://github.com/localpv/localpv
  shortDescription: Inspect and manage localpv's local disks
  description: |
    kubectl localpv disks lists the LocalDisks of a cluster running localpv, explains scheduling decisions
    (explain) and prints the CRD (crd).
  platforms:
$(for arch in amd64 arm64; do cat <<P
  - selector:
      matchLabels:
        os: linux
        arch: $arch
    uri: $download_url/localpv-$version-linux-$arch.tar.gz
    sha256: $(sum $arch)
    bin: localpv
P
done)
EOF
echo "$digest" >"$out/image-digest"
# Pushed images live in the registry; without --no-push nothing is kept in buildah's storage.
if [ $push = 1 ]; then
  buildah manifest rm "$list" >/dev/null
  buildah rmi "$list-amd64" "$list-arm64" >/dev/null
fi
log "done: $out"

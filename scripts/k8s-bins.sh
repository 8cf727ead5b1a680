#!/usr/bin/env bash
# Builds the control-plane binaries the tests and the demo run (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet for the real-node tier, helm) from the Go module proxy, at the versions pinned in scripts/versions.env.
#
# Output goes to a cache outside the repository: $LOCALPV_K8S_BIN_DIR when set, else
# $HOME/.cache/localpv/k8s-<version>/bin. When every binary is already there for the pinned versions, nothing is
# built. The last line printed is always the bin dir, so callers can do `bin=$(scripts/k8s-bins.sh | tail -n1)`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

bin_dir=${LOCALPV_K8S_BIN_DIR:-$HOME/.cache/localpv/k8s-$K8S_VERSION/bin}
work_dir=$(dirname "$bin_dir")/src
stamp="$bin_dir/.versions"
want_stamp="k8s=$K8S_VERSION kubelet etcd=$ETCD_VERSION helm=$HELM_VERSION"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet helm)

log() { printf 'k8s-bins: %s\n' "$*" >&2; }

all_present() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ] || return 1
  for b in "${binaries[@]}"; do [ -x "$bin_dir/$b" ] || return 1; done
}

if all_present; then
  log "up to date ($want_stamp)"
  echo "$bin_dir"
  exit 0
fi

command -v go >/dev/null || { log "error: go is not installed (needed to build the control plane)"; exit 1; }
mkdir -p "$bin_dir" "$work_dir"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=mod"
export CGO_ENABLED=0

timed() {
  local what=$1; shift
  local start=$SECONDS
  log "building $what"
  "$@"
  log "built $what in $((SECONDS - start))s"
}

# --- Kubernetes: a small module of ours that requires k8s.io/kubernetes and points every staging module
# (declared as v0.0.0 in its go.mod) at the matching published v0.x version.
build_kubernetes() {
  local dir="$work_dir/kubernetes" minor staging
  minor=${K8S_VERSION#*.}
  mkdir -p "$dir"
  local kmod
  kmod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [ -f "$kmod" ] || { log "error: could not download k8s.io/kubernetes@v$K8S_VERSION"; return 1; }
  staging=$(awk '/^\tk8s\.io\/[^ ]+ v0\.0\.0$/ {print $1}' "$kmod" | sort -u)
  {
    echo "module localpv.io/k8s-bins"
    echo
    echo "go $(awk '/^go / {print $2; exit}' "$kmod")"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m v0.$minor"; done
    echo ")"
  } >"$dir/go.mod"
  cat >"$dir/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true; cd "$dir" && go mod download)
  local ver="k8s.io/component-base/version"
  local ldflags="-s -w -X $ver.gitVersion=v$K8S_VERSION -X $ver.gitMajor=${K8S_VERSION%%.*}"
  ldflags+=" -X $ver.gitMinor=${minor%%.*} -X $ver.gitTreeState=clean -X $ver.buildDate=1970-01-01T00:00:00Z"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
    timed "$b v$K8S_VERSION" \
      bash -c "cd '$dir' && go build -trimpath -tags tools -ldflags '$ldflags' -o '$bin_dir/$b.tmp' k8s.io/kubernetes/cmd/$b"
    mv "$bin_dir/$b.tmp" "$bin_dir/$b"
  done
}

# --- A single-binary Go tool from its own wrapper module: name, module@version, package.
build_tool() {
  local name=$1 module=$2 version=$3 pkg=$4 ldflags=${5:-}
  local dir="$work_dir/$name"
  mkdir -p "$dir"
  printf 'module localpv.io/%s-bin\n\ngo 1.26\n\nrequire %s %s\n' "$name" "$module" "$version" >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$dir/tools.go"
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true)
  timed "$name $version" \
    bash -c "cd '$dir' && go build -trimpath -tags tools -ldflags '-s -w $ldflags' -o '$bin_dir/$name.tmp' $pkg"
  mv "$bin_dir/$name.tmp" "$bin_dir/$name"
}

total_start=$SECONDS
log "building into $bin_dir ($want_stamp)"
rm -f "$stamp"
build_kubernetes
build_tool etcd go.etcd.io/etcd/server/v3 "v$ETCD_VERSION" go.etcd.io/etcd/server/v3
build_tool helm helm.sh/helm/v3 "v$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
for b in "${binaries[@]}"; do [ -x "$bin_dir/$b" ] || { log "error: $b was not built"; exit 1; }; done
echo "$want_stamp" >"$stamp"
log "all built in $((SECONDS - total_start))s"
echo "$bin_dir"

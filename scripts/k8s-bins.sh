#!/usr/bin/env bash
# Builds the control-plane binaries the tests and the demo run (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet for the real-node tier, helm) from the Go module proxy, at the versions pinned in scripts/versions.env.
#
# Usage: scripts/k8s-bins.sh [newest|oldest]
#   newest (the default): K8S_VERSION and ETCD_VERSION, every binary above.
#   oldest: K8S_OLDEST_VERSION and ETCD_OLDEST_VERSION for the end-to-end subset on the oldest supported
#   Kubernetes; no kubelet (the real-node tier runs on the newest only); helm is the newest's (linked when that one
#   is built, built here otherwise), since helm does not depend on the cluster's version.
#
# Output goes to a cache outside the repository: $LOCALPV_K8S_BIN_DIR when set, else
# $HOME/.cache/localpv/k8s-<version>/bin. When every binary is already there for the pinned versions, nothing is
# built. The last line printed is always the bin dir, so callers can do `bin=$(scripts/k8s-bins.sh | tail -n1)`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

log() { printf 'k8s-bins: %s\n' "$*" >&2; }

newest_bin_dir=$HOME/.cache/localpv/k8s-$K8S_VERSION/bin
case ${1:-newest} in
  newest)
    k8s_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
    # NB: the recipe predates the oldest release; it keeps its text so existing caches stay current.
    k8s_recipe="k8s=$K8S_VERSION kubelet"
    ;;
  oldest)
    K8S_VERSION=$K8S_OLDEST_VERSION
    ETCD_VERSION=$ETCD_OLDEST_VERSION
    k8s_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
    k8s_recipe="k8s=$K8S_VERSION"
    ;;
  *)
    log "error: unknown release '$1' (expected newest or oldest)"
    exit 2
    ;;
esac

bin_dir=${LOCALPV_K8S_BIN_DIR:-$HOME/.cache/localpv/k8s-$K8S_VERSION/bin}
work_dir=$(dirname "$bin_dir")/src
# One stamp per build step, holding the recipe it was built from: changing how helm is built rebuilds helm only
# (the Kubernetes binaries take about 8 minutes on a cold machine, helm about one).
etcd_recipe="etcd=$ETCD_VERSION"
# helm carries the Kubernetes version a released helm has (see build_helm).
helm_recipe="helm=$HELM_VERSION ldflags=k8s-version"

# step_current STEP RECIPE BINARY...: the step's stamp holds RECIPE and every binary is there.
step_current() {
  local step=$1 recipe=$2; shift 2
  [ -f "$bin_dir/.stamp-$step" ] && [ "$(cat "$bin_dir/.stamp-$step")" = "$recipe" ] || return 1
  for b in "$@"; do [ -x "$bin_dir/$b" ] || return 1; done
}

# NB: before per-step stamps, one `.versions` stamp covered everything; a cache made then keeps its Kubernetes
# and etcd binaries (same recipes) and rebuilds only helm.
if [ -f "$bin_dir/.versions" ] && [ "$(cat "$bin_dir/.versions")" = "k8s=$K8S_VERSION kubelet etcd=$ETCD_VERSION helm=$HELM_VERSION" ]; then
  echo "$k8s_recipe" >"$bin_dir/.stamp-k8s"
  echo "$etcd_recipe" >"$bin_dir/.stamp-etcd"
  rm -f "$bin_dir/.versions"
fi

need_k8s=1 need_etcd=1 need_helm=1
step_current k8s "$k8s_recipe" "${k8s_binaries[@]}" && need_k8s=0
step_current etcd "$etcd_recipe" etcd && need_etcd=0
step_current helm "$helm_recipe" helm && need_helm=0
if [ $((need_k8s + need_etcd + need_helm)) = 0 ]; then
  log "up to date ($k8s_recipe, $etcd_recipe, $helm_recipe)"
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
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${k8s_binaries[@]}"
    printf ')\n'
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true; cd "$dir" && go mod download)
  local ver="k8s.io/component-base/version"
  local ldflags="-s -w -X $ver.gitVersion=v$K8S_VERSION -X $ver.gitMajor=${K8S_VERSION%%.*}"
  ldflags+=" -X $ver.gitMinor=${minor%%.*} -X $ver.gitTreeState=clean -X $ver.buildDate=1970-01-01T00:00:00Z"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
  for b in "${k8s_binaries[@]}"; do
    timed "$b v$K8S_VERSION" \
      bash -c "cd '$dir' && go build -trimpath -tags tools -ldflags '$ldflags' -o '$bin_dir/$b.tmp' k8s.io/kubernetes/cmd/$b"
    mv "$bin_dir/$b.tmp" "$bin_dir/$b"
  done
}

# --- A single-binary Go tool from its own wrapper module: name, module@version, package.
tool_module() {
  local name=$1 module=$2 version=$3 pkg=$4
  local dir="$work_dir/$name"
  mkdir -p "$dir"
  printf 'module localpv.io/%s-bin\n\ngo 1.26\n\nrequire %s %s\n' "$name" "$module" "$version" >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$dir/tools.go"
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true)
}

build_tool() {
  local name=$1 module=$2 version=$3 pkg=$4 ldflags=${5:-}
  local dir="$work_dir/$name"
  tool_module "$name" "$module" "$version" "$pkg"
  timed "$name $version" \
    bash -c "cd '$dir' && go build -trimpath -tags tools -ldflags '-s -w $ldflags' -o '$bin_dir/$name.tmp' $pkg"
  mv "$bin_dir/$name.tmp" "$bin_dir/$name"
}

# --- helm with the link-time values its Makefile sets: without the Kubernetes version (taken from the
# k8s.io/client-go it is built with: v0.X -> 1.X), `helm template` assumes v1.20.0 and refuses charts that need
# newer, and `helm lint` warns against the wrong version.
build_helm() {
  tool_module helm helm.sh/helm/v3 "v$HELM_VERSION" helm.sh/helm/v3/cmd/helm
  local cg major minor ldflags
  cg=$(cd "$work_dir/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)
  cg=${cg#v}
  major=$((${cg%%.*} + 1))
  minor=${cg#*.}
  minor=${minor%%.*}
  ldflags="-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=$major -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  timed "helm v$HELM_VERSION (Kubernetes $major.$minor)" \
    bash -c "cd '$work_dir/helm' && go build -trimpath -tags tools -ldflags '-s -w $ldflags' -o '$bin_dir/helm.tmp' helm.sh/helm/v3/cmd/helm"
  mv "$bin_dir/helm.tmp" "$bin_dir/helm"
}

total_start=$SECONDS
log "building into $bin_dir"
if [ $need_k8s = 1 ]; then
  rm -f "$bin_dir/.stamp-k8s"
  build_kubernetes
  echo "$k8s_recipe" >"$bin_dir/.stamp-k8s"
fi
if [ $need_etcd = 1 ]; then
  rm -f "$bin_dir/.stamp-etcd"
  build_tool etcd go.etcd.io/etcd/server/v3 "v$ETCD_VERSION" go.etcd.io/etcd/server/v3
  echo "$etcd_recipe" >"$bin_dir/.stamp-etcd"
fi
if [ $need_helm = 1 ]; then
  rm -f "$bin_dir/.stamp-helm"
  if [ "$bin_dir" != "$newest_bin_dir" ] && (bin_dir=$newest_bin_dir && step_current helm "$helm_recipe" helm); then
    log "linking helm from $newest_bin_dir"
    ln -f "$newest_bin_dir/helm" "$bin_dir/helm" 2>/dev/null || cp "$newest_bin_dir/helm" "$bin_dir/helm"
  else
    build_helm
  fi
  echo "$helm_recipe" >"$bin_dir/.stamp-helm"
fi
for b in "${k8s_binaries[@]}" etcd helm; do [ -x "$bin_dir/$b" ] || { log "error: $b was not built"; exit 1; }; done
log "built what changed in $((SECONDS - total_start))s"
echo "$bin_dir"

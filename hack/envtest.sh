#!/usr/bin/env bash
# hack/envtest.sh — provide kube-apiserver and etcd binaries for envtest.
#
# Our controller tests use controller-runtime's envtest, which runs a real
# kube-apiserver backed by a real etcd (no kubelet, no controllers), so the
# tests exercise actual API validation, defaulting, admission and watch
# semantics instead of a fake client. envtest needs those two binaries on disk
# (KUBEBUILDER_ASSETS). Prebuilt binaries cannot be downloaded in our
# environments (only the Go module proxy is reachable), so we build them from
# Go modules pinned in hack/tools/go.mod (k8s.io/kubernetes + etcd server).
#
# Usage:
#   export KUBEBUILDER_ASSETS="$(hack/envtest.sh)"
#
# Prints the absolute path of the assets directory on stdout (nothing else;
# progress goes to stderr). Idempotent: if both binaries exist and the stamp
# matches the current hack/tools/go.mod + go.sum, it returns immediately.
# A cold build takes several minutes (kube-apiserver is large).
#
# Environment:
#   TIDEGPU_ENVTEST_DIR  cache dir (default: ${XDG_CACHE_HOME:-~/.cache}/tidegpu/envtest/k8s-<version>,
#                        outside the repo so that fresh clones, as CI makes, reuse it)
set -euo pipefail

# Everything goes to stderr except the final path (fd 3 = original stdout).
exec 3>&1 1>&2

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/hack/tools"

# Single source of truth for versions: hack/tools/go.mod.
k8s_version="$(awk '$1 == "k8s.io/kubernetes" { sub(/^v/, "", $2); print $2; exit }' "${tools_dir}/go.mod")"
if [[ -z "${k8s_version}" ]]; then
  echo "envtest.sh: cannot find k8s.io/kubernetes in ${tools_dir}/go.mod" >&2
  exit 1
fi

assets_dir="${TIDEGPU_ENVTEST_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/tidegpu/envtest/k8s-${k8s_version}}"
mkdir -p "${assets_dir}"
assets_dir="$(cd "${assets_dir}" && pwd)"
stamp_file="${assets_dir}/.stamp"

hash_inputs() {
  if command -v sha256sum >/dev/null 2>&1; then
    cat "${tools_dir}/go.mod" "${tools_dir}/go.sum" | sha256sum | cut -d' ' -f1
  else
    cat "${tools_dir}/go.mod" "${tools_dir}/go.sum" | shasum -a 256 | cut -d' ' -f1
  fi
}
want_stamp="k8s=${k8s_version} inputs=$(hash_inputs)"

is_fresh() {
  [[ -x "${assets_dir}/kube-apiserver" && -x "${assets_dir}/etcd" && -f "${stamp_file}" ]] &&
    [[ "$(cat "${stamp_file}")" == "${want_stamp}" ]]
}

if is_fresh; then
  echo "${assets_dir}" >&3
  exit 0
fi

# Serialize concurrent cold builds (e.g. parallel `go test` invocations).
if command -v flock >/dev/null 2>&1; then
  exec 9>"${assets_dir}/.lock"
  flock 9
  if is_fresh; then # another process finished the build while we waited
    echo "${assets_dir}" >&3
    exit 0
  fi
fi

# Temp dir inside the cache dir so the final mv is a same-filesystem rename.
build_dir="$(mktemp -d "${assets_dir}/.build.XXXXXX")"
trap 'rm -rf "${build_dir}"' EXIT

# Fixed version metadata so `kube-apiserver --version` and /version report the
# real release instead of "v0.0.0-master" (component-base's go-build default).
minor="$(echo "${k8s_version}" | cut -d. -f2)"
major="$(echo "${k8s_version}" | cut -d. -f1)"
vpkg="k8s.io/component-base/version"
k8s_ldflags="-s -w \
  -X ${vpkg}.gitVersion=v${k8s_version} \
  -X ${vpkg}.gitMajor=${major} \
  -X ${vpkg}.gitMinor=${minor} \
  -X ${vpkg}.gitTreeState=clean \
  -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"

export CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"

echo "envtest.sh: building kube-apiserver v${k8s_version} (takes several minutes on a cold cache)..."
start=${SECONDS}
go -C "${tools_dir}" build -trimpath -ldflags "${k8s_ldflags}" \
  -o "${build_dir}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "envtest.sh: kube-apiserver built in $((SECONDS - start))s"

echo "envtest.sh: building etcd..."
start=${SECONDS}
go -C "${tools_dir}" build -trimpath -ldflags "-s -w" \
  -o "${build_dir}/etcd" go.etcd.io/etcd/server/v3
echo "envtest.sh: etcd built in $((SECONDS - start))s"

# Invalidate the stamp first: an interrupted swap then just triggers a rebuild.
rm -f "${stamp_file}"
mv -f "${build_dir}/kube-apiserver" "${assets_dir}/kube-apiserver"
mv -f "${build_dir}/etcd" "${assets_dir}/etcd"
echo "${want_stamp}" >"${stamp_file}.tmp"
mv -f "${stamp_file}.tmp" "${stamp_file}"

echo "envtest.sh: assets ready in ${assets_dir}"
echo "${assets_dir}" >&3

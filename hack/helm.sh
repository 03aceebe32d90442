#!/usr/bin/env bash
# hack/helm.sh — provide the helm CLI for the chart's lint and render tests.
#
# helm cannot be downloaded as a release binary in our environments (only the
# Go module proxy is reachable), so it is built from helm.sh/helm/v3, pinned in
# hack/helm/go.mod, and cached outside the repo (as hack/envtest.sh does for
# kube-apiserver and etcd) so that fresh clones reuse it.
#
# Usage:
#   HELM="$(hack/helm.sh)"
#
# Prints the absolute path of the helm binary on stdout (nothing else;
# progress goes to stderr). Idempotent: returns at once when the binary exists
# and its stamp matches hack/helm/go.mod + go.sum. A cold build takes about two
# minutes.
#
# Environment:
#   TIDEGPU_HELM_DIR  cache dir (default: ${XDG_CACHE_HOME:-~/.cache}/tidegpu/helm/<version>)
set -euo pipefail
exec 3>&1 1>&2

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod_dir="${repo_root}/hack/helm"

version="$(awk '($1 == "helm.sh/helm/v3") { print $2; exit } ($1 == "require" && $2 == "helm.sh/helm/v3") { print $3; exit }' "${mod_dir}/go.mod")"
if [[ -z "${version}" ]]; then
  echo "helm.sh: cannot find helm.sh/helm/v3 in ${mod_dir}/go.mod" >&2
  exit 1
fi

# As helm's own Makefile does: the Kubernetes version helm assumes without a
# cluster (helm template, helm lint) is that of the client-go it is built with.
k8s_minor="$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2]; exit }' "${mod_dir}/go.mod")"

cache_dir="${TIDEGPU_HELM_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/tidegpu/helm/${version}}"
mkdir -p "${cache_dir}"
cache_dir="$(cd "${cache_dir}" && pwd)"
stamp_file="${cache_dir}/.stamp"
want_stamp="helm=${version} k8s=1.${k8s_minor} script=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1) inputs=$(cat "${mod_dir}/go.mod" "${mod_dir}/go.sum" | sha256sum | cut -d' ' -f1)"

is_fresh() {
  [[ -x "${cache_dir}/helm" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${want_stamp}" ]]
}

if is_fresh; then
  echo "${cache_dir}/helm" >&3
  exit 0
fi

# Serialize concurrent cold builds (parallel test packages).
exec 9>"${cache_dir}/.lock"
flock 9
if is_fresh; then
  echo "${cache_dir}/helm" >&3
  exit 0
fi

build_dir="$(mktemp -d "${cache_dir}/.build.XXXXXX")"
trap 'rm -rf "${build_dir}"' EXIT

echo "helm.sh: building helm ${version} (about two minutes on a cold cache)..."
start=${SECONDS}
CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" \
  go -C "${mod_dir}" build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${version} \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${k8s_minor} \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${k8s_minor}" \
  -o "${build_dir}/helm" helm.sh/helm/v3/cmd/helm
echo "helm.sh: helm built in $((SECONDS - start))s"

rm -f "${stamp_file}"
mv -f "${build_dir}/helm" "${cache_dir}/helm"
echo "${want_stamp}" >"${stamp_file}.tmp"
mv -f "${stamp_file}.tmp" "${stamp_file}"
echo "${cache_dir}/helm" >&3

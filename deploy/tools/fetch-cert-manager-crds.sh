#!/usr/bin/env bash
# Fetch cert-manager's CRDs (Certificate, Issuer, ClusterIssuer) and print where they are.
#
# They come from cert-manager's own Go module, through the Go module proxy (`go mod download`),
# as deploy/crds/crd-*.yaml: the chart's tls.certManager objects are checked against them
# (tests/deploy) and applied to the test node (tests/node). Those files are the templates of
# cert-manager's Helm chart: their labels hold template text, which the tests drop. Cached in
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/appliance-tools/cert-manager-crds-<version>/
#
# Idempotent: when the files are there it downloads nothing. The last line on stdout is that
# directory (progress goes to stderr). APPLIANCE_TOOLS_CACHE overrides the cache root.
set -euo pipefail

MODULE=github.com/cert-manager/cert-manager
VERSION=v1.17.2
CRDS=(crd-certificates.yaml crd-issuers.yaml crd-clusterissuers.yaml)

cache="${APPLIANCE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-tools}"
dest="$cache/cert-manager-crds-$VERSION"

say() { echo "fetch-cert-manager-crds: $*" >&2; }

if [[ -f "$dest/${CRDS[-1]}" ]]; then
  echo "$dest"
  exit 0
fi
if ! command -v go >/dev/null; then
  say "no go on PATH: the CRDs come from $MODULE@$VERSION through the Go module proxy"
  exit 1
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "downloading $MODULE@$VERSION from the Go module proxy (about 4 MB)"
if ! GOPATH="$work/gopath" GOFLAGS=-modcacherw GOTOOLCHAIN=local \
  go mod download -json "$MODULE@$VERSION" >"$work/download.json"; then
  say "go mod download $MODULE@$VERSION failed"
  exit 1
fi
dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' "$work/download.json")"
mkdir "$work/crds"
for crd in "${CRDS[@]}"; do
  cp "$dir/deploy/crds/$crd" "$work/crds/"
done
mv "$work/crds" "$dest"
echo "$dest"

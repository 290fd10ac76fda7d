#!/usr/bin/env bash
# Build (once) promtool, Prometheus's own checker of metrics, rules and PromQL, from the pinned
# Prometheus Go module through the Go module proxy, and print where it is. The tests use it to
# check /metrics (`promtool check metrics`) and the Grafana dashboard's queries
# (tests/integration/coordinator/test_metrics.py).
#
# The binary is cached outside the repository, keyed by the module version (Prometheus
# v3.16.0 is the Go module version v0.316.0):
#   ${APPLIANCE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/appliance-tools}/promtool-<version>/promtool
# The first build takes ~5 min on 2 cores (its modules are downloaded into Go's module cache);
# later runs print the path at once. The last line on stdout is the binary's path. Exit code 3
# with a message on stderr means "cannot build here" (no Go, or the build failed).
set -euo pipefail

VERSION=v0.316.0 # github.com/prometheus/prometheus, i.e. Prometheus v3.16.0

cache="${APPLIANCE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-tools}"
dest="$cache/promtool-$VERSION"
binary="$dest/promtool"

cannot() { echo "build-promtool: cannot build here: $*" >&2; exit 3; }

if [[ ! -x "$binary" ]]; then
  command -v go >/dev/null 2>&1 || cannot "Go is not installed"
  echo "build-promtool: building promtool from github.com/prometheus/prometheus@$VERSION" >&2
  mkdir -p "$dest"
  work="$(mktemp -d "$cache/.promtool.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  ( cd "$work" && GOBIN="$work" CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
      go install -trimpath -ldflags "-s -w" \
      "github.com/prometheus/prometheus/cmd/promtool@$VERSION" ) >&2 \
    || cannot "go install promtool@$VERSION failed (see above)"
  mv "$work/promtool" "$binary"
fi
"$binary" --help >/dev/null 2>&1 || cannot "$binary does not run (delete it to rebuild)"
echo "$binary"

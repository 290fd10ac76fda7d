#!/usr/bin/env bash
# Find promtool, Prometheus's own checker of metrics, rules and PromQL, and print where it is.
# The tests use it to check /metrics (`promtool check metrics`) and the Grafana dashboard's
# queries (`promtool check rules`; tests/integration/coordinator/test_metrics.py). Both checks
# exist in every promtool since 2.x; MIN_VERSION is the oldest one the tests have passed with.
#
# In order, the first that works:
#   1. `promtool` on PATH, when it is MIN_VERSION or newer;
#   2. the one cached by an earlier run (below);
#   3. Debian's: the `prometheus` package is downloaded (not installed: that would bring a
#      server and its service) and only its usr/bin/promtool is taken out (a second, ~20 MB);
#   4. built from the pinned Prometheus Go module through the Go module proxy (~5-8 min on 2
#      cores), where there is no apt-get.
# Cached outside the repository:
#   ${APPLIANCE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/appliance-tools}/promtool-<version>/promtool
# The last line on stdout is the binary's path. Exit code 3 with a message on stderr means
# "cannot have one here" (none of the above worked).
set -euo pipefail

MIN_VERSION=2.42.0
GO_VERSION=v0.316.0 # github.com/prometheus/prometheus, i.e. Prometheus v3.16.0

cache="${APPLIANCE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-tools}"
say() { echo "promtool.sh: $*" >&2; }
cannot() { say "cannot have promtool here: $*"; exit 3; }

# recent_enough <binary>: its version is MIN_VERSION or newer.
recent_enough() {
  local version
  version=$("$1" --version 2>/dev/null | awk 'NR == 1 {print $3}' | sed 's/[+-].*//') || return 1
  [ -n "$version" ] || return 1
  [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$version" | sort -V | head -n 1)" = "$MIN_VERSION" ]
}

found() { echo "$1"; exit 0; }

if on_path=$(command -v promtool 2>/dev/null) && recent_enough "$on_path"; then
  found "$on_path"
fi
for cached in "$cache"/promtool-debian/promtool "$cache/promtool-$GO_VERSION/promtool"; do
  [ -x "$cached" ] && recent_enough "$cached" && found "$cached"
done

mkdir -p "$cache"
work="$(mktemp -d "$cache/.promtool.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
  say "taking promtool out of Debian's prometheus package"
  # apt-get download writes as the _apt user where it can: a directory it may write to.
  chmod 0777 "$work"
  if (cd "$work" && apt-get download -q prometheus >&2 2>/dev/null) ||
    { [ "$(id -u)" = 0 ] && apt-get update -q >&2 && (cd "$work" && apt-get download -q prometheus >&2); }; then
    deb=$(find "$work" -maxdepth 1 -name 'prometheus_*.deb' | head -n 1)
    if [ -n "$deb" ] && dpkg-deb --fsys-tarfile "$deb" | tar -C "$work" -x ./usr/bin/promtool &&
      recent_enough "$work/usr/bin/promtool"; then
      mkdir -p "$cache/promtool-debian"
      mv "$work/usr/bin/promtool" "$cache/promtool-debian/promtool"
      found "$cache/promtool-debian/promtool"
    fi
    say "Debian's promtool is missing or older than $MIN_VERSION: building one instead"
  fi
fi

command -v go >/dev/null 2>&1 || cannot "no promtool $MIN_VERSION+ on PATH, none from apt-get, and no Go to build one"
dest="$cache/promtool-$GO_VERSION"
say "building promtool from github.com/prometheus/prometheus@$GO_VERSION (minutes)"
mkdir -p "$dest"
( cd "$work" && GOBIN="$work" CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    go install -trimpath -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/promtool@$GO_VERSION" ) >&2 \
  || cannot "go install promtool@$GO_VERSION failed (see above)"
mv "$work/promtool" "$dest/promtool"
"$dest/promtool" --help >/dev/null 2>&1 || cannot "$dest/promtool does not run (delete it to rebuild)"
found "$dest/promtool"

#!/usr/bin/env bash
# The dashboard's and /docs' browser assets, from the npm packages pinned in package-lock.json.
#
#   deploy/web/build.sh            # npm ci, then copy the served files into the Python package
#   deploy/web/build.sh --check    # fail if the committed copies differ from the pinned packages
#   deploy/web/build.sh --deps     # npm ci only: the tests' axe-core (a devDependency)
#
# The copies in appliance/server/web/static/vendor are committed, so `pip install .`, a wheel,
# the sdist and the image all carry a working dashboard without Node.js; run this after changing
# package.json, and `make lint` (--check) keeps the copies equal to what the lockfile pins.
# `npm ci` runs no install scripts (swagger-ui-dist's @scarf/scarf would report the install over
# the network). Nothing is fetched at run time. Uses whatever Node.js and npm the machine has,
# if they are as new as package.json's "engines" asks.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
vendor="$here/../../appliance/server/web/static/vendor"
mode="${1:-build}"

say() { echo "web assets: $*" >&2; }
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  say "needs Node.js and npm (no $(command -v node >/dev/null 2>&1 && echo npm || echo node) here):" \
    "install Node.js 18 or newer with its npm (e.g. apt-get install nodejs npm on a machine" \
    "without Node.js)"
  exit 3
fi
wanted="$(sed -n 's/.*"node": *">=\([0-9]*\).*/\1/p' "$here/package.json")"
have="$(node --version | sed 's/^v\([0-9]*\).*/\1/')"
if [ -n "$wanted" ] && [ "$have" -lt "$wanted" ]; then
  say "needs Node.js $wanted or newer; this machine has $(node --version)"
  exit 3
fi

cd "$here"
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
[ "$mode" = --deps ] && exit 0

# copy_assets <dir>: the files the dashboard and /docs serve, with their licences.
copy_assets() {
  local out="$1" package
  cp node_modules/htmx.org/dist/htmx.min.js "$out/"
  cp node_modules/htmx-ext-sse/sse.js "$out/htmx-ext-sse.js"
  cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css "$out/"
  cp node_modules/swagger-ui-dist/swagger-ui-bundle.js node_modules/swagger-ui-dist/swagger-ui.css \
    node_modules/swagger-ui-dist/favicon-32x32.png "$out/"
  for package in htmx.org htmx-ext-sse uplot swagger-ui-dist; do
    cp "node_modules/$package/LICENSE" "$out/LICENSE.$package"
  done
}

if [ "$mode" = --check ]; then
  fresh="$(mktemp -d)"
  trap 'rm -rf "$fresh"' EXIT
  copy_assets "$fresh"
  if ! diff -r "$fresh" "$vendor" >&2; then
    say "appliance/server/web/static/vendor differs from the packages package-lock.json pins:" \
      "run deploy/web/build.sh and commit the result"
    exit 1
  fi
  say "the committed copies are the pinned packages' files"
  exit 0
fi
rm -rf "$vendor"
mkdir -p "$vendor"
copy_assets "$vendor"
say "$(find "$vendor" -type f | wc -l) files in appliance/server/web/static/vendor"

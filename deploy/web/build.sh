#!/usr/bin/env bash
# The dashboard's and /docs' browser assets, from the npm packages pinned in package-lock.json:
# `npm ci` (no install scripts: swagger-ui-dist's @scarf/scarf would report the install over the
# network), then the files served are copied into the Python package (git-ignored; package-data
# ships them). Nothing is fetched at run time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../appliance/server/web/static/vendor"
cd "$here"
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
rm -rf "$out"
mkdir -p "$out"
cp node_modules/htmx.org/dist/htmx.min.js "$out/"
cp node_modules/htmx-ext-sse/sse.js "$out/htmx-ext-sse.js"
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css "$out/"
cp node_modules/swagger-ui-dist/swagger-ui-bundle.js node_modules/swagger-ui-dist/swagger-ui.css \
  node_modules/swagger-ui-dist/favicon-32x32.png "$out/"
for package in htmx.org htmx-ext-sse uplot swagger-ui-dist; do
  cp "node_modules/$package/LICENSE" "$out/LICENSE.$package" 2>/dev/null || true
done
echo "web assets: $(ls "$out" | wc -l) files in appliance/server/web/static/vendor"

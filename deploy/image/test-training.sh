#!/usr/bin/env bash
# Run the data plane's numerics and training tests inside the appliance image: its Python (Debian
# bookworm's 3.11), its glibc and allocator, its NumPy and OpenBLAS, as uid 10001 on a read-only
# root filesystem with no network. The promise those tests check (the same bits in every process
# of one machine, appliance/workers/models/numerics.py) must hold there as on the host.
#
#   deploy/image/test-training.sh                      # tests appliance:dev (after build.sh)
#   deploy/image/test-training.sh appliance:test       # another tag (or IMAGE=appliance:test)
#   deploy/image/test-training.sh appliance:dev -- -k gpt2   # after --: arguments for pytest
#
# The code under test is this checkout's (appliance/ and tests/, copied to a directory the
# container's user can read); the interpreter and every runtime dependency are the image's, so
# an image built from an older checkout may lack a dependency the code now needs: rebuild it.
# The image has no test tools: pytest and its plugins, at the versions of the project's venv,
# are installed on the host for cp311 on manylinux x86_64 (the image cannot reach an index).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IMAGE=${IMAGE:-appliance:dev}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    case $1 in -*) echo "usage: $0 [IMAGE] [-- PYTEST-ARGS...]" >&2 && exit 2 ;; esac
    IMAGE=$1
    shift
fi
if [ $# -gt 0 ]; then
    [ "$1" = "--" ] || { echo "usage: $0 [IMAGE] [-- PYTEST-ARGS...]" >&2 && exit 2; }
    shift
fi
PYTHON=${PYTHON:-$repo/.venv/bin/python}
TESTS=(tests/unit/workers/models/test_numerics.py tests/unit/workers/transport/test_tensor_codec.py
    tests/integration/test_workers_training.py)
TEST_TOOLS=(pytest pytest-asyncio pytest-timeout psutil)
IMAGE_UID=10001

name=appliance-test-training-$$
work=$(mktemp -d)
log() { printf 'test-training.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
cleanup() {
    set +e
    trap '' PIPE
    docker rm --force "$name" >/dev/null 2>&1
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE

[ -x "$PYTHON" ] || die "no Python at $PYTHON (run \`make install\`, or set PYTHON)"
docker info >/dev/null 2>&1 || die "docker is not running (deploy/image/build.sh starts it)"
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "no image $IMAGE (run deploy/image/build.sh)"

# The same versions as the venv the host's tests run with (a new release cannot break CI here).
pins=()
for tool in "${TEST_TOOLS[@]}"; do
    version=$("$PYTHON" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' \
        "$tool") || die "$tool is not installed in $PYTHON (run \`make install\`)"
    pins+=("$tool==$version")
done
log "installing ${pins[*]} for the image's Python"
"$PYTHON" -m pip install -q --disable-pip-version-check --no-compile --target "$work/tools" \
    --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "${pins[@]}" >&2
# What the tests import, readable by the image's user whatever this checkout's umask was.
mkdir "$work/src"
(cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml appliance tests) |
    tar -C "$work/src" -xf -
chmod -R a+rX "$work"

log "running ${#TESTS[@]} test files in $IMAGE as uid $IMAGE_UID"
# --init: pytest is not PID 1, so a stop signal ends it and its replicas are reaped. The image's
# site-packages come first: only what the image lacks is taken from the tools directory.
docker run --rm --init --name "$name" --network none --read-only --tmpfs /tmp \
    --user "$IMAGE_UID:$IMAGE_UID" --cap-drop ALL --security-opt no-new-privileges \
    --mount "type=bind,source=$work/src,target=/src,readonly" \
    --mount "type=bind,source=$work/tools,target=/test-tools,readonly" \
    --workdir /src --env PYTHONPATH=/src --env HOME=/tmp --env TMPDIR=/tmp \
    "$IMAGE" python -c '
import site, sys
site.addsitedir("/test-tools")  # after the image venv, which sys.path already holds
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
' "${TESTS[@]}" "$@"

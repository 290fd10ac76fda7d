#!/usr/bin/env bash
# Build the appliance image (deploy/Dockerfile) without pulling anything from a registry.
#
#   deploy/image/build.sh                  # builds appliance:dev; prints the tag as the last line
#   deploy/image/build.sh appliance:test   # another tag (or IMAGE=appliance:test)
#   tag=$(deploy/image/build.sh)           # progress goes to stderr, stdout is the tag only
#
# Each step is skipped when its result is already there, so a second run is quick:
#   1. docker.io and debootstrap (apt-get install when missing) and a running dockerd: started in
#      the background when `docker info` fails, logging to $CACHE_DIR/dockerd.log, and left
#      running (extra daemon flags: DOCKERD_FLAGS="--storage-driver=vfs ...");
#   2. the base image $BASE_IMAGE (appliance-base:bookworm): Debian bookworm from debootstrap
#      (minbase + python3, which is 3.11 there), imported with `docker import`. Its rootfs
#      tarball is cached in $CACHE_DIR under a key of the package list and the trimming recipe;
#      the image carries the key as a label and is rebuilt only when the key changes;
#   3. the project wheel (from a copy of the sources, not the repo itself) and the wheels of its
#      runtime dependencies for cp311/manylinux x86_64, fetched on the host: pip inside a build
#      container cannot reach the index;
#   4. `docker build` of a context holding only the Dockerfile and those wheels.
# Runs as root (apt-get, debootstrap, dockerd), or with sudo for those steps.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IMAGE=${1:-${IMAGE:-appliance:dev}}
BASE_IMAGE=${BASE_IMAGE:-appliance-base:bookworm}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-image}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKERD_FLAGS=${DOCKERD_FLAGS:-}
# A fixed timestamp makes the project wheel byte-identical for identical sources, so docker's
# layer cache holds across runs.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}

BASE_SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,ca-certificates
# glibc of bookworm: dependency wheels may be manylinux up to this.
BASE_GLIBC_MINOR=36
DOCKERD_START_SECONDS=60

started=$SECONDS
cleanup_dirs=()

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Remove temporary dirs; a rootfs may still hold mounts (debootstrap mounts /proc and /sys in
# it), so those are unmounted first and rm never crosses into another filesystem.
cleanup() {
    local dir mounts
    set +e
    trap '' PIPE
    for dir in "${cleanup_dirs[@]}"; do
        [ -d "$dir" ] || continue
        mounts=$(awk -v prefix="$dir/" 'index($2, prefix) == 1 { print $2 }' /proc/self/mounts |
            sort -r)
        if [ -n "$mounts" ]; then
            xargs -r -n1 umount -l <<<"$mounts" 2>/dev/null || true
        fi
        as_root rm -rf --one-file-system "$dir" 2>/dev/null || true
    done
}
trap cleanup EXIT
# A signal (Ctrl-C, a cancelled CI job, a closed pipe) exits through the clean-up too.
trap 'exit 1' INT TERM HUP PIPE

ensure_tools() {
    local missing=()
    command -v docker >/dev/null || missing+=(docker.io)
    command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
    command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        # shellcheck disable=SC2046  # the deduplicated names, one word each
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            $(printf '%s\n' "${missing[@]}" | sort -u) >&2
    fi
}

ensure_dockerd() {
    if docker info >/dev/null 2>&1; then
        return
    fi
    local flags=() sudo=() dockerd pid deadline dockerd_log="$CACHE_DIR/dockerd.log"
    read -r -a flags <<<"$DOCKERD_FLAGS"
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    dockerd=$(command -v dockerd || echo /usr/sbin/dockerd)
    log "dockerd is not running: starting it (log: $dockerd_log)"
    # setsid + nohup: the daemon outlives this script, for smoke.sh and later builds. It must
    # not inherit fd 9, or it would hold the build lock for as long as it runs.
    "${sudo[@]}" setsid nohup "$dockerd" "${flags[@]}" >>"$dockerd_log" 2>&1 </dev/null 9>&- &
    pid=$!
    deadline=$((SECONDS + DOCKERD_START_SECONDS))
    until docker info >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null && ! pgrep -x dockerd >/dev/null; then
            tail -n 20 "$dockerd_log" >&2
            die "dockerd exited at start (see $dockerd_log); if its storage driver or" \
                "iptables is the cause: DOCKERD_FLAGS='--storage-driver=vfs --iptables=false'"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 20 "$dockerd_log" >&2
            die "dockerd did not answer within ${DOCKERD_START_SECONDS} s (see $dockerd_log)"
        fi
        sleep 0.5
    done
    log "dockerd is up ($(docker info --format '{{.Driver}}') storage)"
}

# Trim the debootstrap'ed tree to what a runtime image needs (part of the cache key).
trim_rootfs() {
    local root=$1
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
        "$root"/var/log/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
        "$root"/usr/share/locale/* "$root"/usr/share/lintian "$root"/tmp/* "$root"/root/.cache
    # Keep the copyright files: the image redistributes these packages.
    find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    # debootstrap copies these from the host; docker provides its own at run time.
    : >"$root/etc/resolv.conf"
    : >"$root/etc/hostname"
    rm -f "$root/etc/machine-id"
}

base_key() {
    { printf '%s\n' "$BASE_SUITE" minbase "$BASE_PACKAGES"; declare -f trim_rootfs; } |
        sha256sum | cut -c1-16
}

make_base_tarball() {
    local tarball=$1 work
    mkdir -p "$CACHE_DIR/debs"
    work=$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")
    cleanup_dirs+=("$work")
    log "debootstrap $BASE_SUITE (minbase + $BASE_PACKAGES) from $DEBIAN_MIRROR"
    as_root debootstrap --variant=minbase --include="$BASE_PACKAGES" \
        --cache-dir="$CACHE_DIR/debs" "$BASE_SUITE" "$work/rootfs" "$DEBIAN_MIRROR" >&2
    as_root bash -c "$(declare -f trim_rootfs); trim_rootfs \"\$1\"" _ "$work/rootfs"
    as_root tar --numeric-owner -C "$work/rootfs" -czf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    # Tarballs of older package lists are never used again.
    find "$CACHE_DIR" -maxdepth 1 -name "base-$BASE_SUITE-*.tar.gz" ! -path "$tarball" -delete
}

ensure_base() {
    local key tarball current
    key=$(base_key)
    current=$(docker image inspect --format '{{ index .Config.Labels "appliance.base-key" }}' \
        "$BASE_IMAGE" 2>/dev/null || true)
    if [ "$current" = "$key" ]; then
        log "base image $BASE_IMAGE is current (key $key)"
        return
    fi
    tarball="$CACHE_DIR/base-$BASE_SUITE-$key.tar.gz"
    if [ -s "$tarball" ]; then
        log "base rootfs cached: $tarball"
    else
        make_base_tarball "$tarball"
    fi
    log "importing $tarball as $BASE_IMAGE"
    docker import \
        --change "LABEL appliance.base-key=$key" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        --message "debootstrap $BASE_SUITE minbase + $BASE_PACKAGES" \
        "$tarball" "$BASE_IMAGE" >/dev/null
}

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" "$repo/.venv/bin/python" python3.11 python3; do
        if [ -z "$candidate" ] || ! command -v "$candidate" >/dev/null; then
            continue
        fi
        if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
            command -v "$candidate"
            return
        fi
    done
    die "no Python 3.11 found (set PYTHON=/path/to/python3.11)"
}

# The project wheel into $1/app, its runtime dependencies (no extras) into $1/deps.
stage_wheels() {
    local wheels=$1 python src project platforms=() minor
    python=$(find_python)
    src=$(mktemp -d)
    cleanup_dirs+=("$src")
    mkdir -p "$wheels/app" "$wheels/deps"
    # What setuptools packages (pyproject.toml: appliance*, csctl*, the README); building from
    # a copy leaves no build/ or egg-info behind in the working tree.
    (cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - \
        pyproject.toml README.md appliance csctl) | tar -C "$src" -xf -
    log "building the project wheel ($python)"
    "$python" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$wheels/app" \
        "$src" >&2
    project=$(find "$wheels/app" -name 'wafer_appliance-*.whl')
    [ -n "$project" ] || die "pip wheel made no wafer_appliance wheel"
    for ((minor = BASE_GLIBC_MINOR; minor >= 17; minor--)); do
        platforms+=(--platform "manylinux_2_${minor}_x86_64")
    done
    platforms+=(--platform manylinux2014_x86_64) # pip adds manylinux2010 and manylinux1
    log "downloading runtime dependency wheels (cp311, manylinux x86_64)"
    "$python" -m pip download -q --disable-pip-version-check --dest "$wheels/deps" \
        --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
        "${platforms[@]}" "$project" >&2
    rm -f "$wheels/deps/$(basename "$project")"
    log "staged $(basename "$project")" \
        "+ $(find "$wheels/deps" -name '*.whl' | wc -l) dependency wheels"
}

build_image() {
    local context version revision
    context=$(mktemp -d)
    cleanup_dirs+=("$context")
    cp "$repo/deploy/Dockerfile" "$context/Dockerfile"
    stage_wheels "$context/wheels"
    version=$(basename "$context"/wheels/app/wafer_appliance-*.whl | cut -d- -f2)
    revision=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
    log "docker build -t $IMAGE (context: $(du -sh "$context" | cut -f1))"
    docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --label "org.opencontainers.image.title=appliance" \
        --label "org.opencontainers.image.version=$version" \
        --label "org.opencontainers.image.revision=$revision" \
        --tag "$IMAGE" "$context" >&2
    # The image the tag pointed at before (a ~300 MB venv layer) is now untagged: drop it, or
    # every rebuild on a machine that keeps docker's data root would add one.
    docker image prune --force --filter "label=org.opencontainers.image.title=appliance" \
        >/dev/null
}

mkdir -p "$CACHE_DIR"
# One build at a time: they share the cached base and the image tags.
exec 9>"$CACHE_DIR/build.lock"
if ! flock --nonblock 9; then
    log "another build.sh is running: waiting for it (at most 15 min)"
    flock --timeout 900 9 || die "the other build.sh still holds $CACHE_DIR/build.lock"
fi
ensure_tools
ensure_dockerd
ensure_base
build_image
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
log "built $IMAGE: $((size / 1000000)) MB, in $((SECONDS - started)) s"
echo "$IMAGE"

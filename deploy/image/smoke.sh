#!/usr/bin/env bash
# Smoke-test the appliance image: run the coordinator from it the way the Helm chart does
# (read-only root filesystem, tmpfs /tmp, a data volume, uid 10001, no capabilities) and talk to
# it from the host through ports published on 127.0.0.1.
#
#   deploy/image/smoke.sh                     # tests appliance:dev (after deploy/image/build.sh)
#   deploy/image/smoke.sh appliance:test      # another tag (or IMAGE=appliance:test)
#   SMOKE_NETWORK=host deploy/image/smoke.sh  # no port publishing: host network, coordinator
#                                             # bound to 127.0.0.1 on free ports
#
# Checks, in order: the coordinator made its CA and /readyz answers over TLS verified by it; a 1-CS-2 fc_mnist job submitted over REST succeeds (its
# replicas run inside the container); the host's csctl (CSCTL, default .venv/bin/csctl) lists
# it under the NAME ... PHASE header; `csctl version` runs inside the container, as uid 10001;
# `docker stop` (SIGTERM) ends the coordinator with exit code 0. The container and its volume
# are always removed. Exits non-zero, saying which check failed, on any failure.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IMAGE=${1:-${IMAGE:-appliance:dev}}
CSCTL=${CSCTL:-$repo/.venv/bin/csctl}
PYTHON=${PYTHON:-$repo/.venv/bin/python}
SMOKE_NETWORK=${SMOKE_NETWORK:-bridge}
READY_SECONDS=${READY_SECONDS:-60}
JOB_SECONDS=${JOB_SECONDS:-120}
IMAGE_UID=10001

started=$SECONDS
name=appliance-smoke-$$
volume=$name-data
passed=false
ca=$(mktemp)  # the coordinator's CA, once it has made it: every check below pins it

log() { printf 'smoke.sh: %s\n' "$*" >&2; }
fail() {
    log "FAILED: $*"
    exit 1
}

cleanup() {
    # A closed stderr (e.g. `| head`) must not stop the clean-up half way.
    set +e
    trap '' PIPE
    if [ "$passed" != true ] && docker inspect "$name" >/dev/null 2>&1; then
        log "last lines of the coordinator's log:"
        docker logs --tail 40 "$name" >&2 2>&1 || true
    fi
    docker rm --force --volumes "$name" >/dev/null 2>&1 || true
    docker volume rm "$volume" >/dev/null 2>&1 || true
    rm -f "$ca"
}
trap cleanup EXIT
# A signal (Ctrl-C, a cancelled CI job, a closed pipe) exits through the clean-up too.
trap 'exit 1' INT TERM HUP PIPE

[ -x "$CSCTL" ] || fail "no csctl at $CSCTL (run \`make install\`, or set CSCTL)"
[ -x "$PYTHON" ] || PYTHON=$(command -v python3) || fail "no python3 for the HTTP checks"
docker image inspect "$IMAGE" >/dev/null 2>&1 || fail "no image $IMAGE (run deploy/image/build.sh)"

# Two free ports on 127.0.0.1 for gRPC and HTTP.
read -r grpc_port http_port < <("$PYTHON" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

run_flags=(
    --detach --name "$name"
    --read-only --tmpfs /tmp
    --volume "$volume:/var/lib/appliance"
    --cap-drop ALL --security-opt no-new-privileges
)
if [ "$SMOKE_NETWORK" = host ]; then
    inner_grpc_port=$grpc_port
    run_flags+=(--network host --env APPLIANCE_HOST=127.0.0.1
        --env "APPLIANCE_GRPC_PORT=$grpc_port" --env "APPLIANCE_HTTP_PORT=$http_port")
else
    inner_grpc_port=50051
    run_flags+=(--publish "127.0.0.1:$grpc_port:50051" --publish "127.0.0.1:$http_port:8080")
fi
http=https://127.0.0.1:$http_port
export SSL_CERT_FILE=$ca  # Python's urllib verifies the coordinator with its CA

# A named volume starts as a copy of the image's /var/lib/appliance, owned by uid 10001.
docker volume create "$volume" >/dev/null
docker run "${run_flags[@]}" "$IMAGE" >/dev/null || fail "docker run $IMAGE did not start"
log "started $name from $IMAGE (gRPC 127.0.0.1:$grpc_port, HTTP 127.0.0.1:$http_port)"

# 1. Ready: poll until the coordinator made its CA and /readyz answers 200 over TLS verified by
# it, the container exits, or the deadline passes.
deadline=$((SECONDS + READY_SECONDS))
until docker exec "$name" cat /var/lib/appliance/tls/ca.crt >"$ca" 2>/dev/null &&
    "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "$http/readyz" 2>/dev/null; do
    [ "$(docker inspect --format '{{.State.Running}}' "$name")" = true ] ||
        fail "the coordinator exited before it was ready"
    [ "$SECONDS" -lt "$deadline" ] || fail "/readyz did not answer within $READY_SECONDS s"
    sleep 0.5
done
log "ready after $((SECONDS - started)) s"

# 2. A job end to end: its replicas are processes in the read-only container.
job_id=$("$PYTHON" - "$http" "$JOB_SECONDS" <<'EOF'
import json, sys, time, urllib.request

base, seconds = sys.argv[1], float(sys.argv[2])
body = {"params": {"model": {"name": "fc_mnist"}}, "num_csx": 1, "num_steps": 20,
        "labels": {"smoke": "image"}}
request = urllib.request.Request(f"{base}/api/v1/jobs", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
job = json.load(urllib.request.urlopen(request, timeout=10))
deadline = time.monotonic() + seconds
while job["phase"] not in ("SUCCEEDED", "FAILED", "CANCELLED") and time.monotonic() < deadline:
    time.sleep(0.5)
    job = json.load(urllib.request.urlopen(f"{base}/api/v1/jobs/{job['id']}", timeout=10))
if job["phase"] != "SUCCEEDED":
    replicas = [f"{r['name']}: {r['message']}\n{r['log_tail']}".rstrip()
                for r in job["replicas"] if r["message"] or r["log_tail"]]
    sys.exit("\n".join([f"job {job['id']} is {job['phase']}: {job['reason']}", *replicas]))
print(job["id"])
EOF
) || fail "the fc_mnist job did not succeed within $JOB_SECONDS s"
log "job $job_id SUCCEEDED"

# 3. The host's csctl through the published gRPC port.
listing=$("$CSCTL" --server "127.0.0.1:$grpc_port" --certificate-authority "$ca" get jobs -a) ||
    fail "csctl --server 127.0.0.1:$grpc_port get jobs -a failed"
printf '%s\n' "$listing" >&2
grep -Eq '^NAME[[:space:]].*PHASE' <<<"$listing" || fail "csctl printed no NAME ... PHASE header"
grep -Eq "^${job_id}[[:space:]].*SUCCEEDED" <<<"$listing" ||
    fail "csctl did not list $job_id as SUCCEEDED"

# 3b. The dashboard and its browser assets (package data copied from npm) are served.
for path in / /ui/static/vendor/htmx.min.js /ui/static/vendor/swagger-ui-bundle.js /docs; do
    "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
        "$http$path" || fail "the image does not serve $path"
done

# 4. csctl is on the image's PATH, and the container runs as the non-root user.
docker exec "$name" csctl --server "127.0.0.1:$inner_grpc_port" \
    --certificate-authority /var/lib/appliance/tls/ca.crt version >&2 ||
    fail "csctl version failed inside the container"
uid=$(docker exec "$name" id -u)
[ "$uid" = "$IMAGE_UID" ] || fail "the container runs as uid $uid, not $IMAGE_UID"

# 5. SIGTERM drains and exits cleanly.
docker stop --time 20 "$name" >/dev/null
code=$(docker inspect --format '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || fail "the coordinator exited with code $code on SIGTERM"

passed=true
log "passed in $((SECONDS - started)) s"

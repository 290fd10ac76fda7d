#!/usr/bin/env bash
# Start a throwaway local Slurm for the benchmarks: munged, slurmctld and NODES slurmd
# (`slurmd -N nodeK`, one port each), all on 127.0.0.1, all state under one directory.
#
#   bench/slurm/up.sh            # -> prints the directory; `. DIR/env` sets SLURM_CONF
#   bench/slurm/down.sh          # stops what up.sh started (pid files), removes nothing else
#
# Settings (environment): SLURM_BENCH_DIR (default $BENCH_WORK or $TMPDIR, then
# /appliance-bench/slurm), SLURM_BENCH_NODES (4), SLURM_BENCH_PORT (16817: slurmctld uses
# PORT..PORT+3, slurmd nodeK PORT+10+K). Installs Debian's slurm-wlm if sbatch is missing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dir="${SLURM_BENCH_DIR:-${BENCH_WORK:-${TMPDIR:-/tmp}}/appliance-bench/slurm}"
nodes="${SLURM_BENCH_NODES:-4}"
port="${SLURM_BENCH_PORT:-16817}"

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm
fi

if [ -e "$dir/run/slurmctld.pid" ] || [ -e "$dir/run/munged.pid" ]; then
    echo "up.sh: $dir already holds a running Slurm; run bench/slurm/down.sh first" >&2
    exit 1
fi
rm -rf "$dir"
mkdir -p "$dir"/{state,spool,run,log,munge}
chmod 711 "$dir/munge"  # the key stays 0400; clients need to reach the socket
dir="$(cd "$dir" && pwd)"

# munge: a key of our own, ten threads (the throughput guide's advice), a socket in $dir.
mungekey --create --keyfile="$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" --num-threads=10 --origin=127.0.0.1 --force

node_lines=""
for k in $(seq 1 "$nodes"); do
    node_lines+="NodeName=node$k NodeAddr=127.0.0.1 NodeHostname=$(hostname) \
Port=$((port + 10 + k)) CPUs=1 RealMemory=1000 State=UNKNOWN"$'\n'
done
sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$(hostname)|g" \
    -e "s|@CTLD_PORTS@|$port-$((port + 3))|g" -e "s|@SLURMD_PORT@|$((port + 10))|g" \
    "$here/slurm.conf.in" | awk -v nodes="$node_lines" '{ if ($0 == "@NODES@") printf "%s", nodes; else print }' \
    > "$dir/slurm.conf"
printf 'export SLURM_CONF=%s\n' "$dir/slurm.conf" > "$dir/env"
export SLURM_CONF="$dir/slurm.conf"

ulimit -n 65536 2>/dev/null || true
slurmctld -f "$SLURM_CONF"
for k in $(seq 1 "$nodes"); do
    slurmd -f "$SLURM_CONF" -N "node$k"
done

for _ in $(seq 1 60); do
    idle="$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)"
    [ "$idle" -eq "$nodes" ] && { echo "$dir"; exit 0; }
    sleep 0.5
done
echo "up.sh: the $nodes nodes did not all come up idle; see $dir/log" >&2
sinfo -N >&2 || true
exit 1

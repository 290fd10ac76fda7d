#!/usr/bin/env bash
# Stop the Slurm that bench/slurm/up.sh started: only the processes named by its pid files
# (and only if each pid still runs the expected program). SLURM_BENCH_DIR as for up.sh;
# `--remove` also deletes the directory.
set -euo pipefail

dir="${SLURM_BENCH_DIR:-${BENCH_WORK:-${TMPDIR:-/tmp}}/appliance-bench/slurm}"
[ -d "$dir/run" ] || { echo "down.sh: nothing under $dir" >&2; exit 0; }

stop() {  # stop PIDFILE PROGRAM
    local pid_file="$1" program="$2" pid
    [ -e "$pid_file" ] || return 0
    pid="$(tr -dc 0-9 < "$pid_file")"
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$program" ]; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do
            [ -d "/proc/$pid" ] || break
            sleep 0.1
        done
        [ -d "/proc/$pid" ] && kill -KILL "$pid"
    fi
    rm -f "$pid_file"
}

for pid_file in "$dir"/run/slurmd-*.pid; do
    stop "$pid_file" slurmd
done
stop "$dir/run/slurmctld.pid" slurmctld
stop "$dir/run/munged.pid" munged
if [ "${1:-}" = "--remove" ]; then
    rm -rf "$dir"
fi

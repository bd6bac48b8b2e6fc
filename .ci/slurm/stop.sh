#!/usr/bin/env bash
# Stop the daemons that .ci/slurm/start.sh started, and nothing else.
#
#   .ci/slurm/stop.sh [STATE_DIR]
#
# Reads STATE_DIR/cluster.env (written by start.sh) and
#  1. cancels the jobs still in this cluster's queue (scancel, while
#     slurmctld runs) and waits up to 20 s for their job steps to end;
#  2. stops, by PID: slurmd, then slurmctld;
#  3. terminates job steps of this cluster that are still alive (slurmstepd
#     outlives slurmd): only slurmstepd processes whose working directory is
#     inside STATE_DIR, with their descendants;
#  4. stops munged, if start.sh started it (a reused munged is left alone);
#  5. once all of that is gone, removes the slurm.conf and gres.conf that
#     start.sh wrote: a config naming a controller that no longer runs makes
#     every `scontrol` wait about 9 s for it, and Snakemake's SLURM plugin runs
#     `scontrol show config` whenever Snakemake starts, so every later snakemake
#     command on the machine would start 9 s late.
# A PID is signalled only while /proc/PID/comm still names the expected
# program, so a recycled PID is never hit. Each daemon gets SIGTERM and up to
# 20 s to exit, then SIGKILL. Exit status 0 when everything recorded is gone.
set -uo pipefail

STATE_DIR=${1:-${TMPDIR:-/tmp}/bastion-slurm-ci}
ENV_FILE=$STATE_DIR/cluster.env

log() { echo "slurm/stop.sh: $*"; }

if [ ! -d "$STATE_DIR" ]; then
    log "no $STATE_DIR: nothing to stop"
    exit 0
fi
STATE_DIR=$(cd "$STATE_DIR" && pwd -P)

SLURMD_PID="" SLURMCTLD_PID="" MUNGED_PID=""
if [ -f "$ENV_FILE" ]; then
    # shellcheck disable=SC1090
    . "$ENV_FILE"
else
    log "no $ENV_FILE: no daemons recorded (only leftover job steps are checked)"
fi

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rc=0
gone_within() {  # gone_within TRIES PID NAME: true once PID has exited (checked every 0.2 s)
    local k
    for ((k = 0; k < $1; k++)); do
        pid_alive "$2" "$3" || return 0
        sleep 0.2
    done
    return 1
}

stop_one() {  # stop_one NAME PID
    local name=$1 pid=$2
    if [ -z "$pid" ]; then
        return 0
    fi
    if ! pid_alive "$pid" "$name"; then
        log "$name (pid $pid) already gone"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    gone_within 100 "$pid" "$name" && { log "stopped $name (pid $pid)"; return 0; }
    log "$name (pid $pid) ignored SIGTERM for 20 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    gone_within 25 "$pid" "$name" && { log "killed $name (pid $pid)"; return 0; }
    log "ERROR: $name (pid $pid) is still running"
    rc=1
}

# Job steps of this cluster: slurmstepd processes (they outlive slurmd) run
# with their working directory in STATE_DIR/log.
our_stepds() {
    local p cwd
    for p in $(pgrep -x slurmstepd || true); do
        pid_alive "$p" slurmstepd || continue
        cwd=$(readlink "/proc/$p/cwd" 2>/dev/null) || continue
        case "$cwd" in "$STATE_DIR" | "$STATE_DIR"/*) echo "$p" ;; esac
    done
}
descendants() {  # descendants PID -> PID and all its descendants
    ps -eo pid=,ppid= | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END {
            n = 1; q[1] = root
            for (i = 1; i <= n; i++) {
                print q[i]; m = split(kids[q[i]], c, " ")
                for (j = 1; j <= m; j++) q[++n] = c[j]
            }
        }'
}
wait_no_stepds() {  # wait_no_stepds SECONDS
    local k
    for ((k = 0; k < $1 * 5; k++)); do
        [ -z "$(our_stepds)" ] && return 0
        sleep 0.2
    done
    return 1
}

# 1. Cancel the jobs still queued or running while the controller is up.
if pid_alive "$SLURMCTLD_PID" slurmctld; then
    jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs still in the queue: $jobs"
        # shellcheck disable=SC2086
        timeout 10 scancel $jobs || true
        wait_no_stepds 20 || true
    fi
fi

# 2. Daemons, compute side first.
stop_one slurmd "$SLURMD_PID"
stop_one slurmctld "$SLURMCTLD_PID"

# 3. Job steps that survived (controller was already gone, or cancel hung):
#    terminate each step's processes, then the step daemon itself.
stepds=$(our_stepds)
if [ -n "$stepds" ]; then
    log "terminating leftover job steps: $(echo $stepds)"
    for round in TERM KILL; do
        for p in $stepds; do
            for q in $(descendants "$p" | sort -rn); do
                kill -"$round" "$q" 2>/dev/null || true
            done
        done
        wait_no_stepds 10 && break
    done
    if [ -n "$(our_stepds)" ]; then
        log "ERROR: job steps still running: $(echo $(our_stepds))"
        rc=1
    fi
fi

stop_one munged "$MUNGED_PID"

if [ "$rc" -eq 0 ] && [ -f "$ENV_FILE" ]; then
    # Keep the logs/state for inspection, but mark the cluster as stopped.
    mv -f "$ENV_FILE" "$ENV_FILE.stopped"
fi
if [ "$rc" -eq 0 ]; then
    for f in "$CONF_DIR/slurm.conf" "$CONF_DIR/gres.conf"; do
        ours "$f" && rm -f "$f" && log "removed $f"
    done
fi
exit "$rc"

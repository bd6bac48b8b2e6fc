#!/usr/bin/env bash
# CI entry point for the SLURM tests (called by .ci/run, as root):
# install SLURM, start a single-node cluster, run pytest (by default
# `-m slurm tests/`) against it, and always stop the daemons again. Exits with pytest's status
# (124/137 if pytest ran past its time limit).
#
# Environment: PYTHON (default: python) runs pytest; CI_SLURM_TEST_TIMEOUT
# (default 900) bounds the pytest run in seconds.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$REPO" || exit 1
PY=${PYTHON:-python}
LIMIT=${CI_SLURM_TEST_TIMEOUT:-900}
T0=$(date +%s)
STATE_DIR=""
TEST_PGID=""

finish() {
    local rc=$? k
    trap - EXIT INT TERM
    # `timeout` leads its own process group (pytest, snakemake, ...). Whatever
    # is left of it (interrupted, or snakemake ignoring the SIGTERM sent on
    # the time limit) gets SIGTERM, 20 s, then SIGKILL.
    if [ -n "$TEST_PGID" ] && kill -0 -- "-$TEST_PGID" 2>/dev/null; then
        echo "slurm: stopping what is left of the test run (process group $TEST_PGID)" >&2
        kill -TERM -- "-$TEST_PGID" 2>/dev/null || true
        for ((k = 0; k < 100; k++)); do
            kill -0 -- "-$TEST_PGID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$TEST_PGID" 2>/dev/null || true
    fi
    if [ -n "$STATE_DIR" ]; then
        bash "$REPO/.ci/slurm/stop.sh" "$STATE_DIR" || {
            echo "slurm: WARNING: stop.sh failed; state kept in $STATE_DIR" >&2
            [ "$rc" -ne 0 ] || rc=1
        }
        # On success the logs are of no interest; keep them after a failure.
        [ "$rc" -ne 0 ] || rm -rf "$STATE_DIR"
    fi
    echo "slurm: SLURM tests took $(( $(date +%s) - T0 )) s wall (exit $rc)"
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== slurm: install"
bash "$REPO/.ci/slurm/install.sh" || exit 1

echo "== slurm: start cluster"
STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/slurm-ci.XXXXXX") || exit 1
bash "$REPO/.ci/slurm/start.sh" "$STATE_DIR" || exit 1

# PYTEST_ARGS (default: the SLURM tests only) selects what runs against the cluster;
# .ci/run passes the README's whole test command.
read -r -a ARGS <<< "${PYTEST_ARGS:--m slurm tests/ -q}"
echo "== slurm: pytest ${ARGS[*]} (limit ${LIMIT} s)"
# In the background + wait, so that INT/TERM reach the trap at once.
timeout -k 10 "$LIMIT" "$PY" -m pytest "${ARGS[@]}" &
TEST_PGID=$!
wait "$TEST_PGID"
exit $?

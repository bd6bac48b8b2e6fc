#!/usr/bin/env bash
# Start a throw-away single-node SLURM cluster on this machine (CI only).
#
#   .ci/slurm/start.sh [STATE_DIR]
#
# * writes /etc/slurm/slurm.conf and /etc/slurm/gres.conf (refuses to replace
#   a slurm.conf that this script did not generate; stop.sh removes both);
# * puts all SLURM state, spool, logs and pid files under STATE_DIR
#   (default: ${TMPDIR:-/tmp}/bastion-slurm-ci);
# * creates two fake GPU device nodes so `--gpus` / `--gres=gpu` jobs are
#   scheduled and receive CUDA_VISIBLE_DEVICES;
# * starts munged (as the munge user, unless a working munged is already
#   running, which is then reused and left alone), slurmctld and
#   `slurmd -N localhost`, all as plain background daemons (no systemd);
# * waits (bounded) for the node to become idle and prints its state;
# * records what it started in STATE_DIR/cluster.env for stop.sh.
#
# Why /etc/slurm and not SLURM_CONF: the snakemake SLURM job step clears every
# SLURM_* variable before its inner `srun`, which then cannot find a config.
#
# Tunables (environment): CI_SLURM_WAIT_S (default 60) bounds the wait for an
# idle node; CI_SLURM_GPUS (default 2) is the number of fake GPUs.
set -euo pipefail

STATE_DIR=${1:-${TMPDIR:-/tmp}/bastion-slurm-ci}
WAIT_S=${CI_SLURM_WAIT_S:-60}
NGPU=${CI_SLURM_GPUS:-2}
NODE=localhost

die() { echo "slurm/start.sh: ERROR: $*" >&2; exit 1; }
log() { echo "slurm/start.sh: $*"; }

[ "$(id -u)" -eq 0 ] || die "must run as root (daemons, /etc/slurm, mknod)"
for b in slurmctld slurmd sinfo scontrol munged munge unmunge; do
    command -v "$b" >/dev/null 2>&1 || die "'$b' not found; run .ci/slurm/install.sh first"
done

t_start=$(date +%s)
mkdir -p "$STATE_DIR"
STATE_DIR=$(cd "$STATE_DIR" && pwd -P)
ENV_FILE=$STATE_DIR/cluster.env

# --- refuse to fight with a cluster that is already running -----------------
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [ -f "$ENV_FILE" ]; then
    # shellcheck disable=SC1090
    ( . "$ENV_FILE"; pid_alive "${SLURMCTLD_PID:-}" slurmctld || pid_alive "${SLURMD_PID:-}" slurmd ) \
        && die "a cluster recorded in $ENV_FILE is still running; run .ci/slurm/stop.sh $STATE_DIR first"
    rm -f "$ENV_FILE"
fi
for d in slurmctld slurmd; do
    for p in $(pgrep -x "$d" || true); do
        pid_alive "$p" "$d" && die "a '$d' is already running (pid $p); not starting a second cluster"
    done
done
for port in 6817 6818; do  # slurmctld, slurmd (SLURM defaults)
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "TCP port $port is already in use; SLURM needs 6817 (slurmctld) and 6818 (slurmd)"
    fi
done
if [ -f "$CONF_DIR/slurm.conf" ] && ! ours "$CONF_DIR/slurm.conf"; then
    die "$CONF_DIR/slurm.conf exists and was not written by this script; refusing to overwrite it"
fi

# --- machine size ---------------------------------------------------------
CPUS=$(nproc)
AVAIL_MB=$(free -m | awk '/^Mem:/ {print ($7 != "" ? $7 : $4)}')
MEM_MB=$(( AVAIL_MB * 3 / 4 ))   # leave a quarter for the OS and the daemons
[ "$MEM_MB" -ge 256 ] || MEM_MB=256

# --- directories and fake GPUs --------------------------------------------
mkdir -p "$STATE_DIR"/{ctld,spool,log,run,dev}
chmod 0755 "$STATE_DIR"
GPU_NOTE=""
for ((i = 0; i < NGPU; i++)); do
    dev=$STATE_DIR/dev/gpu$i
    [ -c "$dev" ] && continue
    rm -f "$dev"
    # Same major/minor as /dev/null: slurmd only needs a character device.
    if ! mknod -m 0666 "$dev" c 1 3 2>/dev/null; then
        die "cannot mknod $dev (no CAP_MKNOD?); fake GPUs need character devices"
    fi
done
GPU_FILES="$STATE_DIR/dev/gpu[0-$((NGPU - 1))]"
[ "$NGPU" -eq 1 ] && GPU_FILES="$STATE_DIR/dev/gpu0"

# --- configuration --------------------------------------------------------
mkdir -p "$CONF_DIR"
cat >"$CONF_DIR/slurm.conf" <<EOF
$MARK
# State: $STATE_DIR -- written $(date -u +%FT%TZ). Do not edit; rerun start.sh.
ClusterName=ci
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# No slurmdbd: sacct cannot report; snakemake must poll with squeue, so keep
# finished jobs visible in slurmctld for 10 minutes (plugin needs >= 3x its
# initial status-check wait, default 40 s).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=60
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/spool
SlurmctldPidFile=$STATE_DIR/run/slurmctld.pid
SlurmdPidFile=$STATE_DIR/run/slurmd.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
GresTypes=gpu
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:fake:$NGPU State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$CONF_DIR/gres.conf" <<EOF
$MARK
AutoDetect=off
NodeName=$NODE Name=gpu Type=fake File=$GPU_FILES
EOF
log "config: $NODE CPUs=$CPUS RealMemory=${MEM_MB}M gpus=fake:$NGPU state=$STATE_DIR"

: >"$ENV_FILE"
record() { echo "$1=$2" >>"$ENV_FILE"; }
record STATE_DIR "$STATE_DIR"
record STARTED_AT "$(date -u +%FT%TZ)"

wait_pidfile() {  # wait_pidfile FILE NAME SECONDS -> echo pid
    local f=$1 name=$2 n=$(( $3 * 5 )) pid
    for ((k = 0; k < n; k++)); do
        if [ -s "$f" ]; then
            pid=$(tr -dc '0-9' <"$f")
            if pid_alive "$pid" "$name"; then echo "$pid"; return 0; fi
        fi
        sleep 0.2
    done
    return 1
}

tail_logs() {
    for f in "$STATE_DIR"/log/*.log /var/log/munge/munged.log; do
        [ -f "$f" ] || continue
        echo "----- tail -n 40 $f -----" >&2
        tail -n 40 "$f" >&2 || true
    done
}
fail() { echo "slurm/start.sh: ERROR: $*" >&2; tail_logs; exit 1; }

# --- munge ------------------------------------------------------------------
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munge: reusing the munged that is already running (will not stop it)"
    record MUNGED_PID ""
else
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    fi
    rm -f /run/munge/munged.pid
    setsid runuser -u munge -- munged </dev/null >>"$STATE_DIR/log/munged.out" 2>&1 \
        || fail "munged failed to start"
    MUNGED_PID=$(wait_pidfile /run/munge/munged.pid munged 10) || fail "munged did not write its pid file"
    record MUNGED_PID "$MUNGED_PID"
    ok=0
    for ((k = 0; k < 50; k++)); do
        if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then ok=1; break; fi
        sleep 0.2
    done
    [ "$ok" -eq 1 ] || fail "munged (pid $MUNGED_PID) does not answer munge/unmunge"
    log "munge: started munged pid $MUNGED_PID"
fi

# --- slurmctld, slurmd -------------------------------------------------------
rm -f "$STATE_DIR"/run/*.pid
# -c: start with clean job state even if STATE_DIR is reused.
setsid slurmctld -c </dev/null >>"$STATE_DIR/log/slurmctld.out" 2>&1 || fail "slurmctld failed to start"
SLURMCTLD_PID=$(wait_pidfile "$STATE_DIR/run/slurmctld.pid" slurmctld 20) || fail "slurmctld did not come up"
record SLURMCTLD_PID "$SLURMCTLD_PID"
log "slurmctld: pid $SLURMCTLD_PID"

setsid slurmd -N "$NODE" </dev/null >>"$STATE_DIR/log/slurmd.out" 2>&1 || fail "slurmd failed to start"
SLURMD_PID=$(wait_pidfile "$STATE_DIR/run/slurmd.pid" slurmd 20) || fail "slurmd did not come up"
record SLURMD_PID "$SLURMD_PID"
log "slurmd: pid $SLURMD_PID"

# --- wait until the node is schedulable ------------------------------------------
state=""
deadline=$(( $(date +%s) + WAIT_S ))
while :; do
    state=$(timeout 10 sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1 || true)
    case "$state" in
        idle|mixed|allocated) break ;;
    esac
    pid_alive "$SLURMCTLD_PID" slurmctld || fail "slurmctld (pid $SLURMCTLD_PID) exited"
    pid_alive "$SLURMD_PID" slurmd || fail "slurmd (pid $SLURMD_PID) exited"
    if [ "$(date +%s)" -ge "$deadline" ]; then
        timeout 10 sinfo -N -l >&2 || true
        timeout 10 sinfo -R >&2 || true
        fail "node '$NODE' not idle after ${WAIT_S}s (state: '${state:-no answer}')"
    fi
    sleep 1
done
record READY 1
log "node $NODE is $state after $(( $(date +%s) - t_start )) s"
timeout 10 sinfo -N -o '%P %N %T %c %m %G' || true
timeout 10 scontrol show node "$NODE" | grep -E 'State=|Gres=|CfgTRES=' || true

#!/usr/bin/env bash
# Install a single-node SLURM (controller + compute daemon + client tools) and
# munge from Debian packages. Safe to run repeatedly: does nothing when the
# binaries are already present. Must run as root (CI runs as root).
set -euo pipefail

need=(slurmctld slurmd sinfo sbatch munged)
missing=0
for b in "${need[@]}"; do
    if ! command -v "$b" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$b" ]; then
        missing=1
    fi
done
if [ "$missing" -eq 0 ]; then
    echo "slurm: already installed ($(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null || echo '?'))"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "slurm/install.sh: must run as root to apt-get install" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)
# Refresh the package lists only when they are missing (fresh containers).
if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
    apt-get update -qq
fi
if ! apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null; then
    # Stale lists can point at vanished package versions: refresh once, retry.
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi
echo "slurm: installed $(dpkg-query -W -f='${Version}' slurmctld) in $(( $(date +%s) - t0 )) s"

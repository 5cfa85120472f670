#!/usr/bin/env bash
# Install the Debian packages of the single-node SLURM cluster that tests/test_cluster.py starts
# (slurmctld, slurmd, slurm-client, munge). A no-op when they are there; never fails the caller:
# without apt or root the cluster tests skip and say why.
#   bash tools/dev/install_slurm.sh
say() { printf '[install_slurm] %s\n' "$*"; }
PACKAGES=(slurmctld slurmd slurm-client munge)
BINARIES=(slurmctld slurmd srun munged)
missing=0
for binary in "${BINARIES[@]}"; do
  command -v "$binary" >/dev/null 2>&1 || missing=1
done
if [ "$missing" -eq 0 ]; then
  say "slurm and munge already installed; nothing to do"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  say "no apt-get or not root: the SLURM cluster tests will skip (install ${PACKAGES[*]})"
  exit 0
fi
say "installing ${PACKAGES[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } \
    >/tmp/install_slurm.log 2>&1; then
  say "apt-get failed (log: /tmp/install_slurm.log); the SLURM cluster tests will skip"
fi
exit 0

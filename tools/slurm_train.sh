#!/usr/bin/env bash
# Training on a Slurm cluster, mmdet's / mmseg's convention:
#   GPUS=16 bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args ...]
# GPUS (total, default 8), GPUS_PER_NODE, CPUS_PER_TASK, SRUN_ARGS: tools/slurm_launch.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$here/slurm_launch.sh" "$1" "$2" train.py "$3" --work-dir="$4" "${@:5}"

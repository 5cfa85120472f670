#!/usr/bin/env bash
# Evaluation on a Slurm cluster, mmdet's / mmseg's convention:
#   bash tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args ...]
# Pass --work-dir WORK_DIR of the training run so tools/collect_results.py finds the metrics.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$here/slurm_launch.sh" "$1" "$2" test.py "$3" "$4" "${@:5}"

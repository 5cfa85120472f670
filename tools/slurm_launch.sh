#!/usr/bin/env bash
# srun one task per GPU running tools/SCRIPT with mmengine's slurm launcher; used by
# slurm_train.sh and slurm_test.sh:  bash tools/slurm_launch.sh PARTITION JOB_NAME SCRIPT ARGS...
# GPUS (total tasks, default 8), GPUS_PER_NODE (8 or fewer), CPUS_PER_TASK (5), SRUN_ARGS as in
# mmdet. GPUS_PER_NODE=0 runs on a CPU partition: no --gres, GPUS tasks placed by SLURM
# (TASKS_PER_NODE fixes how many per node); pass --cfg-options env_cfg.dist_cfg.backend=gloo.
# --kill-on-bad-exit=1: a task that dies ends the whole job instead of leaving the others
# waiting in a collective.
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
SCRIPT=$3
shift 3
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
if [ "$GPUS_PER_NODE" -eq 0 ]; then
  placement=(${TASKS_PER_NODE:+--ntasks-per-node="$TASKS_PER_NODE"})
else
  placement=(--gres=gpu:"$GPUS_PER_NODE" --ntasks-per-node="$GPUS_PER_NODE")
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2086  # SRUN_ARGS is a list of options
PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" --job-name="$JOB_NAME" --ntasks="$GPUS" "${placement[@]}" \
  --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 \
  ${SRUN_ARGS:-} \
  "${PYTHON:-python}" -u "$here/$SCRIPT" "$@" --launcher=slurm

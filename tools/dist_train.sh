#!/usr/bin/env bash
# Multi-process training on one machine through torchrun:
#   bash tools/dist_train.sh CONFIG NUM_PROCS [train.py args ...]
# NNODES / NODE_RANK / MASTER_ADDR / PORT as in mmdet's and mmseg's scripts.
set -euo pipefail
CONFIG=$1
GPUS=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "${PYTHON:-python3}" -m torch.distributed.run \
  --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}" \
  --nproc_per_node="$GPUS" --master_port="${PORT:-29500}" \
  "$here/$(basename "${SCRIPT:-train.py}")" "$CONFIG" --launcher pytorch "$@"

#!/usr/bin/env bash
# Multi-process evaluation on one machine through torchrun:
#   bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [test.py args ...]
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
shift 3
SCRIPT=test.py exec bash "$(dirname "${BASH_SOURCE[0]}")/dist_train.sh" "$CONFIG" "$GPUS" "$CHECKPOINT" "$@"

#!/usr/bin/env bash
# The CUDA path, end to end, on a GPU machine that has only Python, torch and torchvision: no
# network, no compiler. Made to finish in under 8 minutes on one H100/H200.
#
#   here, with network:   bash tools/make_wheels.sh .whl 3.12   (the pure-Python stack, ~14 MB)
#   there:                bash tools/gpu_check.sh [WHEELS=.whl]
#
# 1. installs the wheels offline into the active Python (--no-deps: numpy, opencv, scipy,
#    matplotlib ... are taken as found), mmvit5 editable and its mmcv.ops start-up file;
#    tools/check_env.py then checks the torch range, the pins and mmcv.ops without mmvit5;
# 2. the GPU tests: pytest -m cuda (ViT5 CUDA vs CPU, autocast, fused SDPA selected, with_cp,
#    windows, RoIAlign/NMS on CUDA vs CPU);
# 3. ViT5-B Mask R-CNN (configs/vit5_maskrcnn_coco.py, LSJ 1024) --amp at batch 2 and 4, and
#    ViT5-B UperNet (configs/vit5_upernet_ade20k.py, 512 crops) --amp at batch 8, each ITERS
#    iterations through tools/train.py on generated shapes data: img/s and peak memory;
# 4. tools/benchmark.py backbone rows in bf16 at 1024: ViT5-B and timm ViT-B, global and
#    window 14, with and without with_cp.
# Everything goes to ${OUT:-work_dirs/gpu_check}; the summary is printed last.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheels=$(cd "${1:-$here/.whl}" && pwd)
PY=${PYTHON:-python3}
out=$(mkdir -p "${OUT:-$here/work_dirs/gpu_check}" && cd "${OUT:-$here/work_dirs/gpu_check}" && pwd)
iters=${ITERS:-10}
say() { printf '[gpu_check] %s\n' "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
cd "$here"

"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps "$wheels"/*.whl
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation -e .
"$PY" _mmvit5_hook.py >/dev/null
"$PY" tools/check_env.py | tee -a "$out/summary.txt"
"$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" \
  || { say "no CUDA device: stopping after the environment check"; exit 1; }
say "$("$PY" -c "import torch; print(torch.cuda.get_device_name(), 'torch', torch.__version__)")"

"$PY" -m pytest -q -m cuda tests 2>&1 | tee "$out/pytest_cuda.txt" | tail -n 3
say "pytest -m cuda: $(tail -n 1 "$out/pytest_cuda.txt")"

"$PY" tools/make_toy_data.py "$out/data" --train 32 --val 2 --size 1024 >/dev/null
classes=()
for split in train val test; do
  classes+=("${split}_dataloader.dataset.metainfo.classes=(rectangle,ellipse,triangle)")
done
# train ITERS iterations of CONFIG at batch B with --amp; print img/s and peak GiB from the log
train() {
  local name=$1 config=$2 batch=$3 data=$4; shift 4
  local work="$out/$name"
  "$PY" tools/train.py "$config" --amp --work-dir "$work" --cfg-options \
    model.backbone.init_cfg=None train_dataloader.batch_size="$batch" \
    train_dataloader.num_workers=4 train_cfg.max_iters="$iters" \
    train_cfg.val_interval=$((iters + 1)) default_hooks.logger.interval=2 \
    default_hooks.checkpoint.interval=$((iters + 1)) \
    train_dataloader.dataset.data_root="$data" val_dataloader.dataset.data_root="$data" \
    test_dataloader.dataset.data_root="$data" "$@" > "$work.log" 2>&1 \
    || { tail -n 30 "$work.log"; say "$name failed (log: $work.log)"; return 0; }
  "$PY" - "$work.log" "$batch" "$name" <<'PYEOF' | tee -a "$out/summary.txt"
import re, statistics, sys
log, batch, name = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
times = [float(t) for t in re.findall(r'Iter\(train\).* time: ([0-9.]+)', log)][1:]
memory = [int(m) for m in re.findall(r'Iter\(train\).* memory: ([0-9]+)', log)]
peak = f'{max(memory) / 1024:.1f} GiB' if memory else 'n/a'  # mmengine logs it on CUDA only
print(f'[gpu_check] {name}: {batch / statistics.median(times):.1f} img/s '
      f'({statistics.median(times):.3f} s/iter), peak {peak}')
PYEOF
}
for batch in 2 4; do
  train "maskrcnn_b$batch" configs/vit5_maskrcnn_coco.py "$batch" "$out/data/coco/" "${classes[@]}" \
    val_evaluator.ann_file="$out/data/coco/annotations/instances_val2017.json" \
    test_evaluator.ann_file="$out/data/coco/annotations/instances_val2017.json"
done
train upernet_b8 configs/vit5_upernet_ade20k.py 8 "$out/data/ade/ADEChallengeData2016"

"$PY" tools/benchmark.py --models vit5-b --peers timm-vit-b --sizes 1024 --dtype bfloat16 \
  --window 14 --with-cp --json "$out/benchmark.json" --plot "$out/benchmark.png" \
  2>&1 | tee "$out/benchmark.txt" | grep -E '^\|' || say "benchmark failed: $out/benchmark.txt"
cat "$out/summary.txt"

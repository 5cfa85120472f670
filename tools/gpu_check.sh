#!/usr/bin/env bash
# The CUDA path, end to end, on a GPU machine that has only Python, torch and torchvision: no
# network, no compiler. Sized for one ~9-minute command on one H100/H200 (BUDGET seconds).
#
#   here, with network:   bash tools/make_wheels.sh .whl 3.12   (the pure-Python stack, ~14 MB)
#   there:                bash tools/gpu_check.sh [WHEELS=.whl]
#
# 1. installs the wheels offline into the active Python (--no-deps: numpy, opencv, scipy,
#    matplotlib ... are taken as found), mmvit5 from the checkout (PYTHONPATH) and its mmcv.ops
#    start-up file;
#    tools/check_env.py then checks the torch range, the pins and mmcv.ops without mmvit5.
# Then, most important first, each section capped in time (a section that runs out is
# reported and the next one starts; the last ones are skipped when BUDGET is spent):
# 2. the GPU tests: pytest -m cuda (ViT5 CUDA vs CPU, autocast, fused SDPA selected, with_cp,
#    windows, the training path against the unfused model, saved activations against timm,
#    RoIAlign/NMS on CUDA vs CPU);
# 3. training targets in bf16 (float32 weights, autocast): ViT5-B vs timm ViT-B step time and
#    peak memory at 512 and 1024, the Mask R-CNN step against mmpretrain's ViT-B at 1024;
# 4. the one-block breakdown against timm at 1024;
# 5. ViT5-B Mask R-CNN (configs/vit5_maskrcnn_coco.py, LSJ 1024) --amp at batch 2 through
#    tools/train.py on generated shapes data: img/s and peak memory;
# 6. the torch.compile'd training pair at 1024.
# Everything goes to ${OUT:-work_dirs/gpu_check}; the summary is printed last.
set -uo pipefail
start=$SECONDS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheels=$(cd "${1:-$here/.whl}" && pwd)
PY=${PYTHON:-python3}
out=$(mkdir -p "${OUT:-$here/work_dirs/gpu_check}" && cd "${OUT:-$here/work_dirs/gpu_check}" && pwd)
budget=${BUDGET:-540}
iters=${ITERS:-8}
say() { printf '[gpu_check] %s\n' "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
cd "$here"
export PYTHONUNBUFFERED=1

# section NAME SECONDS CMD...: run CMD with at most SECONDS (and what is left of BUDGET),
# output in $out/NAME.txt
section() {
  local name=$1 cap=$2; shift 2
  local left=$((budget - (SECONDS - start)))
  ((left < cap)) && cap=$left
  if ((cap < 20)); then say "$name: skipped, budget spent"; return 0; fi
  say "$name: starting, at most ${cap}s"
  local t0=$SECONDS
  timeout "$cap" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  say "$name: rc $rc after $((SECONDS - t0))s$( ((rc == 124)) && echo ' (time cap)')"
}

set -e
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps "$wheels"/*.whl
# mmvit5 from the checkout through a path file (an editable install needs setuptools from the
# network there), pointing at links to it: check_env drops the checkout itself from sys.path
# to see what is installed. The hook's file sorts after it and finds _mmvit5_hook at start.
links=$(mktemp -d)
ln -s "$here/mmvit5" "$here/_mmvit5_hook.py" "$links/"
"$PY" - "$links" <<'PYEOF'
import os, sys, sysconfig
with open(os.path.join(sysconfig.get_paths()['purelib'], 'mmvit5-checkout.pth'), 'w') as f:
    f.write(sys.argv[1] + '\n')
PYEOF
"$PY" _mmvit5_hook.py >/dev/null
"$PY" -c "import sys, mmvit5; print('[gpu_check] python', sys.version.split()[0], sys.flags, 'mmvit5 from', mmvit5.__file__)" | tee -a "$out/summary.txt"
"$PY" tools/check_env.py | tee -a "$out/summary.txt"
"$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" \
  || { say "no CUDA device: stopping after the environment check"; exit 1; }
say "$("$PY" -c "import torch; print(torch.cuda.get_device_name(), 'torch', torch.__version__)")"
set +e

section pytest_cuda 150 "$PY" -m pytest -q -m cuda tests
say "pytest -m cuda: $(tail -n 1 "$out/pytest_cuda.txt")"

bench=("$PY" tools/benchmark.py --sizes none --peers none --dtype bfloat16 --target-rounds 10)
section targets 150 "${bench[@]}" --targets 512,1024 --json "$out/targets.json" \
  --plot "$out/targets.png"
section detector_target 120 "${bench[@]}" --detector-targets 1024 --batch 2 \
  --json "$out/detector.json" --plot "$out/detector.png"
section breakdown 60 "${bench[@]}" --breakdown 1024 --json "$out/breakdown.json"
grep -hE '^\| ViT5|^\| \*\*sum|\*\*total' "$out"/targets.txt "$out"/detector_target.txt \
  "$out"/breakdown.txt 2>/dev/null | tee -a "$out/summary.txt"

"$PY" tools/make_toy_data.py "$out/data" --train 16 --val 2 --size 1024 >/dev/null
classes=()
for split in train val test; do
  classes+=("${split}_dataloader.dataset.metainfo.classes=(rectangle,ellipse,triangle)")
done
data="$out/data/coco/"
section maskrcnn_b2 120 "$PY" tools/train.py configs/vit5_maskrcnn_coco.py --amp \
  --work-dir "$out/maskrcnn_b2" --cfg-options model.backbone.init_cfg=None \
  train_dataloader.batch_size=2 train_dataloader.num_workers=4 train_cfg.max_iters="$iters" \
  train_cfg.val_interval=$((iters + 1)) default_hooks.logger.interval=2 \
  default_hooks.checkpoint.interval=$((iters + 1)) train_dataloader.dataset.data_root="$data" \
  val_dataloader.dataset.data_root="$data" test_dataloader.dataset.data_root="$data" \
  "${classes[@]}" val_evaluator.ann_file="$data/annotations/instances_val2017.json" \
  test_evaluator.ann_file="$data/annotations/instances_val2017.json"
"$PY" - "$out/maskrcnn_b2.txt" <<'PYEOF' | tee -a "$out/summary.txt"
import re, statistics, sys
log = open(sys.argv[1]).read()
times = [float(t) for t in re.findall(r'Iter\(train\).* time: ([0-9.]+)', log)][1:]
memory = [int(m) for m in re.findall(r'Iter\(train\).* memory: ([0-9]+)', log)]
loss = re.findall(r'Iter\(train\).* loss: ([0-9.]+)', log)
if times:
    print(f'[gpu_check] Mask R-CNN b2 --amp: {2 / statistics.median(times):.1f} img/s '
          f'({statistics.median(times):.3f} s/iter), peak '
          f'{max(memory) / 1024 if memory else float("nan"):.1f} GiB, losses {loss}')
else:
    print('[gpu_check] Mask R-CNN b2: no training iteration logged')
PYEOF

section targets_compiled 240 "${bench[@]}" --targets 1024 --target-compile --target-rounds 6 \
  --json "$out/targets_compiled.json" --plot "$out/targets_compiled.png"
grep -h 'torch.compile' "$out/targets_compiled.txt" | tee -a "$out/summary.txt"
say "total $((SECONDS - start))s"
cat "$out/summary.txt"

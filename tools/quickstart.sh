#!/usr/bin/env bash
# The main job on an embedded default, no download needed: install what is missing, generate
# a small shapes dataset in the COCO and ADE20K layouts, train a small ViT-5 Mask R-CNN and
# UperNet through tools/train.py, evaluate them with tools/test.py (COCO mAP, mIoU) and write
# visualizations. Everything goes under ${OUT:-work_dirs/quickstart}.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
out=$(mkdir -p "${OUT:-$here/work_dirs/quickstart}" && cd "${OUT:-$here/work_dirs/quickstart}" && pwd)
iters=${ITERS:-200}
# validate four times (every 50 of 200 iterations), so curves.png shows the metric as a curve
val_every=$(( iters >= 4 ? iters / 4 : iters ))
bash "$here/tools/install.sh"
cd "$out"
[ -d data/toy/coco ] || "$PY" "$here/tools/make_toy_data.py" data/toy --train 64 --val 16 --size 256
# iteration, loss and ETA of each logged training iteration (the full log goes to a file);
# a bash loop, not awk: mawk reads a pipe in blocks and would print nothing until the end
progress() {
  local line re='Iter\(train\) *\[ *([0-9]+/[0-9]+)\].* eta: ([^ ]+).* loss: ([^ ]+)'
  while IFS= read -r line; do
    if [[ $line =~ $re ]]; then
      printf '[quickstart] %s iter %s  loss %s  eta %s\n' "$1" "${BASH_REMATCH[1]}" \
        "${BASH_REMATCH[3]}" "${BASH_REMATCH[2]}"
    fi
  done
}
for name in maskrcnn upernet; do
  cfg="$here/configs/toy/vit5-tiny_${name}_shapes.py"
  echo "[quickstart] training ViT-5 $name for $iters iterations (log: $out/$name)"
  "$PY" "$here/tools/train.py" "$cfg" --work-dir "$out/$name" --iters "$iters" \
    --cfg-options train_cfg.val_interval="$val_every" 2>&1 | tee "$out/$name.train.log" \
    | progress "$name" || { tail -n 40 "$out/$name.train.log"; exit 1; }
  "$PY" "$here/tools/test.py" "$cfg" "$out/$name/iter_$iters.pth" --work-dir "$out/$name/test" \
    --show-dir "$out/$name/vis" 2>&1 | tee "$out/$name.test.log" | grep '^\[test\]'
done
"$PY" "$here/tools/plot_curves.py" "$out/maskrcnn" "$out/upernet" --out "$out/curves.png"
echo "[quickstart] results: $out/{maskrcnn,upernet}.test.log; checkpoints: $out/*/iter_$iters.pth"
echo "[quickstart] visualizations: $out/maskrcnn/vis, $out/upernet/vis; curves: $out/curves.png"

#!/usr/bin/env bash
# The main job on an embedded default, no download needed: install what is missing, generate
# a small shapes dataset in the COCO and ADE20K layouts, train a small ViT-5 Mask R-CNN and
# UperNet through tools/train.py, evaluate them with tools/test.py (COCO mAP, mIoU) and write
# visualizations. Everything goes under ${OUT:-work_dirs/quickstart}.
# MODELS picks the toy models of configs/toy/: "maskrcnn upernet" by default; "cascade"
# (Cascade Mask R-CNN), "mask2former" (Mask2Former instances) and "depth" (DPT depth) are
# opt-in, to keep the default run short:
#   MODELS="maskrcnn upernet cascade mask2former depth" bash tools/quickstart.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
out=$(mkdir -p "${OUT:-$here/work_dirs/quickstart}" && cd "${OUT:-$here/work_dirs/quickstart}" && pwd)
iters=${ITERS:-200}
read -r -a models <<< "${MODELS:-maskrcnn upernet}"
config_of() {
  case $1 in
    maskrcnn|upernet|depth) echo "$here/configs/toy/vit5-tiny_$1_shapes.py" ;;
    cascade) echo "$here/configs/toy/vit5-tiny_cascade-maskrcnn_shapes.py" ;;
    mask2former) echo "$here/configs/toy/vit5-tiny_mask2former-ins_shapes.py" ;;
    *) echo "[quickstart] MODELS: unknown model '$1'; expected some of: maskrcnn upernet" \
         "cascade mask2former depth" >&2; return 2 ;;
  esac
}
for name in "${models[@]}"; do config_of "$name" > /dev/null; done  # refused before installing
# validate four times (every 50 of 200 iterations), so curves.png shows the metric as a curve
val_every=$(( iters >= 4 ? iters / 4 : iters ))
bash "$here/tools/install.sh"
cd "$out"
# written again when an older generator made it (data/toy/VERSION)
"$PY" "$here/tools/make_toy_data.py" data/toy --train 64 --val 16 --size 256 --if-stale
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
for name in "${models[@]}"; do
  cfg=$(config_of "$name")
  echo "[quickstart] training ViT-5 $name for $iters iterations (log: $out/$name)"
  "$PY" "$here/tools/train.py" "$cfg" --work-dir "$out/$name" --iters "$iters" \
    --cfg-options train_cfg.val_interval="$val_every" 2>&1 | tee "$out/$name.train.log" \
    | progress "$name" || { tail -n 40 "$out/$name.train.log"; exit 1; }
  "$PY" "$here/tools/test.py" "$cfg" "$out/$name/iter_$iters.pth" --work-dir "$out/$name/test" \
    --show-dir "$out/$name/vis" 2>&1 | tee "$out/$name.test.log" | grep '^\[test\]'
done
"$PY" "$here/tools/plot_curves.py" "${models[@]/#/$out/}" --out "$out/curves.png"
for name in "${models[@]}"; do
  echo "[quickstart] $name: results $out/$name.test.log, checkpoint $out/$name/iter_$iters.pth," \
    "visualizations $out/$name/vis"
done
echo "[quickstart] curves: $out/curves.png"

#!/usr/bin/env bash
# The CUDA path, end to end, on a GPU machine that has only Python, torch and torchvision: no
# network, no compiler. Planned as calls that each fit one 10-minute command of a lent GPU.
#
#   here, with network:   bash tools/make_wheels.sh .whl 3.12   (the pure-Python stack, ~14 MB)
#   there:                CALL=1 bash tools/gpu_check.sh [WHEELS=.whl]    (then CALL=2, 3, 4)
#   anywhere:             DRY_RUN=1 CALL=all bash tools/gpu_check.sh      (the plan, nothing run)
#
# Every call starts the same way, each step under its own time cap:
#   setup          installs the wheels offline (--no-deps) into the active Python, mmvit5 from
#                  this checkout through a path file, runs tools/check_env.py, needs CUDA;
#   smoke_triton   tools/gpu_smoke.py with the Triton kernels (MMVIT5_TRITON=1): a two-block
#                  ViT5-B slice (width 768, heads of 64, a windowed and a global block, input
#                  2x3x1024x1024) trains one step in bf16 and in fp16 autocast, against float32
#                  on the CPU;
#   smoke_pytorch  the same on the PyTorch path (MMVIT5_TRITON=0): always in call 1, in the
#                  others only when smoke_triton failed. Only when it passed is MMVIT5_TRITON=0
#                  exported for the later sections, and the summary says so.
# Then the call's sections, most important first (the plan is printed at the start; DRY_RUN=1
# prints it with each command and runs nothing). A section that reaches its cap is reported
# and the next one starts; none starts once BUDGET (default 590 s) is spent.
#   CALL=1  does it work, and the eager targets: pytest -m cuda without the compile tests;
#           ViT5-B against timm ViT-B at 1024, batch 1 and 4 (forward, training step, memory,
#           window 14 against global, flex_attention windows against batched SDPA windows);
#   CALL=2  compiling: the compile tests; the torch.compile'd training pair (109 s on an H200);
#   CALL=3  the detector and the loop: the Mask R-CNN step against mmpretrain's ViT-B detector
#           and plain ViTDet; tools/train.py (vit5_maskrcnn_coco.py --amp, LSJ 1024, generated
#           data) at batch 2 and its loop against the model-only step (img/s, peak GiB, MFU);
#           the one-block breakdown;
#   CALL=4  extras: ViT5-L at batch 2, ViT5-B at batch 4, the per-part cost (--components).
# SECTIONS='names or globs' runs those sections of any call instead (after setup and smoke).
#
# Files: OUT (default results/gpu_check; a lent machine's $OUT comes back) gets rows.jsonl
# (every smoke case, row and target, appended the moment it is measured), summary.txt and
# logs.tar.gz (every section's log and JSON, packed again after each section). WORK (default
# work_dirs/gpu_check) holds the logs, the generated data and the training work dirs; the
# training sections save no checkpoint. MMVIT5_COMMIT names the commit where there is no .git.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PY=${PYTHON:-python3} PYTHONUNBUFFERED=1
call=${CALL:-1}
export DRY_RUN=${DRY_RUN:-0}
dry=$DRY_RUN
budget=${BUDGET:-590}
export ITERS=${ITERS:-8}
export OUT_DIR=${OUT:-$here/results/gpu_check} WORK=${WORK:-$here/work_dirs/gpu_check}
export WHEELS=${1:-$here/.whl} ROWS=$OUT_DIR/rows.jsonl LOGS=$WORK/logs HERE=$here
if [[ -z ${MMVIT5_COMMIT:-} ]] && git -C "$here" rev-parse --short HEAD >/dev/null 2>&1; then
  MMVIT5_COMMIT=$(git -C "$here" rev-parse --short HEAD)
fi
[[ -n ${MMVIT5_COMMIT:-} ]] && export MMVIT5_COMMIT
cd "$here"

# The plan: call, section, cap in seconds (the budget is the sum of the caps), most important
# first within a call. Every call runs FIXED first. Caps are about twice the H200 times where
# there are some (results/gpu_h200/summary.txt): the compiled pair took 109 s.
FIXED='setup 60
smoke_triton 120
smoke_pytorch 70'
PLAN='1 pytest_cuda 120
1 targets_b1 100
1 targets_b4 110
2 pytest_cuda_compile 120
2 targets_compiled 200
3 detector_target 80
3 train_vit5-b_b2 70
3 train_vit5-b_b2_loop 45
3 breakdown 50
4 train_vit5-l_b2 80
4 train_vit5-l_b2_loop 50
4 train_vit5-b_b4 70
4 train_vit5-b_b4_loop 45
4 components 90'
CALLS=$(cut -d' ' -f1 <<< "$PLAN" | sort -un | xargs)

# the command of section $1, into the array CMD
command_of() {
  local bench=("$PY" tools/benchmark.py --sizes none --peers none --dtype bfloat16
               --rows-log "$ROWS" --rows-tag "$1")
  local io=(--json "$LOGS/$1.json")
  case $1 in
    setup) CMD=(setup_env) ;;
    smoke_triton | smoke_pytorch)
      CMD=("$PY" tools/gpu_smoke.py --triton "$([[ $1 == smoke_triton ]] && echo 1 || echo 0)"
           --rows-log "$ROWS" --rows-tag "$1") ;;
    pytest_cuda) CMD=("$PY" -m pytest -v --durations=0 -p no:cacheprovider -m cuda
                      -k 'not compile' tests) ;;
    pytest_cuda_compile) CMD=("$PY" -m pytest -v --durations=0 -p no:cacheprovider -m cuda
                              -k compile tests) ;;
    targets_b1 | targets_b4)
      CMD=("${bench[@]}" --targets 1024 --batch "${1#targets_b}" --target-rounds 10 "${io[@]}"
           --plot "$LOGS/$1.png") ;;
    targets_compiled)
      CMD=("${bench[@]}" --targets 1024 --target-compile --target-rounds 6 "${io[@]}"
           --plot "$LOGS/$1.png") ;;
    detector_target)
      CMD=("${bench[@]}" --detector-targets 1024 --batch 2 --target-rounds 6 "${io[@]}"
           --plot "$LOGS/$1.png") ;;
    breakdown) CMD=("${bench[@]}" --breakdown 1024 --target-rounds 10 "${io[@]}") ;;
    train_*_loop)
      local train=${1%_loop} arch batch
      arch=${train#train_}; batch=${arch##*_b}; arch=${arch%_b*}
      CMD=("${bench[@]}" --target-rounds 4 --batch "$batch" --full-size 1024
           --train-log "$LOGS/$train.txt:$(config_of "$arch"):$arch" "${io[@]}") ;;
    train_*)
      local arch=${1#train_}
      CMD=(train_section "$(config_of "${arch%_b*}")" "${arch##*_b}" "$1") ;;
    components)
      CMD=("$PY" tools/benchmark.py --components --sizes 1024 --component-train-sizes 1024
           --component-rounds 2 --dtype bfloat16 --rows-log "$ROWS" --rows-tag "$1" "${io[@]}"
           --plot "$LOGS/$1.png") ;;
    *) echo "gpu_check: no command for section '$1'" >&2; return 1 ;;
  esac
}
config_of() { [[ $1 == vit5-l ]] && echo configs/vit5-l_maskrcnn_coco.py \
  || echo configs/vit5_maskrcnn_coco.py; }

# install offline, mmvit5 from the checkout, the environment check, a CUDA device (exit 3)
setup_env() {
  if [[ $DRY_RUN == 1 ]]; then
    echo " install $WHEELS/*.whl offline, mmvit5 from $HERE, tools/check_env.py, CUDA present"
    return 0
  fi
  set -e
  if compgen -G "$WHEELS/*.whl" > /dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps "$WHEELS"/*.whl
  else
    echo "no wheels in $WHEELS: using the packages installed"
  fi
  # mmvit5 from the checkout through a path file (an editable install needs setuptools from the
  # network there), pointing at links to it: check_env drops the checkout itself from sys.path
  # to see what is installed. The hook's file sorts after it and finds _mmvit5_hook at start.
  # A machine where mmvit5 is installed already (pip install -e) keeps its install.
  if ! (cd / && env -u PYTHONPATH "$PY" -c 'import mmvit5' 2> /dev/null); then
    local links
    links=$(mktemp -d)
    ln -s "$HERE/mmvit5" "$HERE/_mmvit5_hook.py" "$links/"
    "$PY" -c "import os, sys, sysconfig
path = os.path.join(sysconfig.get_paths()['purelib'], 'mmvit5-checkout.pth')
open(path, 'w').write(sys.argv[1] + '\n')" "$links"
    "$PY" _mmvit5_hook.py > /dev/null
  fi
  "$PY" -c "import sys, mmvit5
print('python', sys.version.split()[0], 'mmvit5 from', mmvit5.__file__)"
  "$PY" tools/check_env.py
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" \
    || { echo 'no CUDA device'; exit 3; }
  "$PY" -c "import torch; print(torch.cuda.get_device_name(), 'torch', torch.__version__)"
}

# tools/train.py on generated data (made on first use), no checkpoint written: the final save
# alone is 1.3 GB for ViT5-B, 3.9 GB for ViT5-L
train_section() {
  local config=$1 batch=$2 name=$3 data=$WORK/data/coco/
  [[ -f ${data}annotations/instances_val2017.json || $DRY_RUN == 1 ]] \
    || "$PY" tools/make_toy_data.py "$WORK/data" --train 16 --val 2 --size 1024 > /dev/null
  local opts=(model.backbone.init_cfg=None train_dataloader.num_workers=4
              train_cfg.max_iters="$ITERS" train_cfg.val_interval=$((ITERS + 1))
              default_hooks.logger.interval=1 default_hooks.checkpoint.interval=$((ITERS + 1))
              default_hooks.checkpoint.save_last=False train_dataloader.batch_size="$batch"
              train_dataloader.dataset.data_root="$data" val_dataloader.dataset.data_root="$data"
              test_dataloader.dataset.data_root="$data"
              val_evaluator.ann_file="${data}annotations/instances_val2017.json"
              test_evaluator.ann_file="${data}annotations/instances_val2017.json")
  local split
  for split in train val test; do
    opts+=("${split}_dataloader.dataset.metainfo.classes=(rectangle,ellipse,triangle)")
  done
  local cmd=("$PY" tools/train.py "$config" --amp --work-dir "$WORK/$name" --cfg-options
             "${opts[@]}")
  if [[ $DRY_RUN == 1 ]]; then printf ' %q' "${cmd[@]}"; echo; else "${cmd[@]}"; fi
}

say() {
  printf '[gpu_check] %s\n' "$*"
  [[ $dry == 1 ]] || printf '[gpu_check] %s\n' "$*" >> "$OUT_DIR/summary.txt"
}
declare -A RC=()

# section NAME CAP: its command under at most CAP seconds (less when BUDGET runs short), output
# in $LOGS/NAME.txt, its [row] lines printed as they come
section() {
  local name=$1 cap=$2
  command_of "$name" || return 1
  if [[ $dry == 1 ]]; then
    printf '[gpu_check] plan: %s %ss:' "$name" "$cap"
    if declare -F "${CMD[0]}" > /dev/null; then
      "${CMD[@]}"  # prints what it would run
    else
      printf ' %q' "${CMD[@]}"; echo
    fi
    return 0
  fi
  local left=$((budget - (SECONDS - start)))
  ((left < cap)) && cap=$left
  if ((cap < 15)); then say "$name: skipped, budget spent"; RC[$name]=skipped; return 0; fi
  say "$name: starting, at most ${cap}s"
  local t0=$SECONDS rc
  if declare -F "${CMD[0]}" > /dev/null; then  # a function of this script: in a child bash
    CMD=(bash -c "$(declare -f setup_env train_section); \"\$@\"" "$name" "${CMD[@]}")
  fi
  timeout -k 5 "$cap" "${CMD[@]}" 2>&1 | tee "$LOGS/$name.txt" | grep --line-buffered '^\[row\]'
  rc=${PIPESTATUS[0]}
  RC[$name]=$rc
  say "$name: rc $rc after $((SECONDS - t0))s$( ((rc == 124 || rc == 137)) && echo ' (time cap)')"
  tar -czf "$OUT_DIR/logs.tar.gz" -C "$WORK" logs 2> /dev/null
}

# the sections this call runs, as 'name cap' lines
selected() {
  local c name cap pattern patterns
  read -ra patterns <<< "${SECTIONS:-}"  # no glob expansion: the patterns match names
  while read -r c name cap; do
    if [[ -n ${SECTIONS:-} ]]; then
      for pattern in "${patterns[@]}"; do
        # shellcheck disable=SC2053
        [[ $name == $pattern ]] && echo "$name $cap" && break
      done
    elif [[ $call == all || $call == "$c" ]]; then
      echo "$name $cap"
    fi
  done <<< "$PLAN"
}

# run_call LABEL FALLBACK_ALWAYS 'name cap' lines: the plan, then setup, smoke and sections
run_call() {
  local label=$1 fallback_always=$2 chosen=$3 total name cap
  total=$(awk '{s += $2} END {print s}' <<< "$FIXED
$chosen")
  say "plan, $label: ${total}s of caps, budget ${budget}s (a lent GPU runs one command for at" \
      "most 600 s)$( ((total > budget)) && echo ': OVER BUDGET, the last sections will be skipped')"
  while read -r name cap; do
    [[ -z $name ]] && continue
    say "  $name ${cap}s$([[ $name == smoke_pytorch && $fallback_always == 0 ]] \
      && echo ' (only if smoke_triton fails)')"
  done <<< "$FIXED
$chosen"
  if [[ $dry == 1 ]]; then
    while read -r name cap; do
      [[ -n $name ]] && section "$name" "$cap"
    done <<< "$FIXED
$chosen"
    return 0
  fi
  start=$SECONDS
  RC=()
  say "commit ${MMVIT5_COMMIT:-not recorded (set MMVIT5_COMMIT)}, rows to $ROWS"
  section setup "$(fixed_cap setup)"
  if [[ ${RC[setup]} != 0 ]]; then
    say "setup failed (rc ${RC[setup]}): $(tail -n 2 "$LOGS/setup.txt" | tr '\n' ' ')"
    return 1
  fi
  say "$(tail -n 1 "$LOGS/setup.txt")"
  section smoke_triton "$(fixed_cap smoke_triton)"
  if [[ ${RC[smoke_triton]} == 0 ]]; then
    say "Triton kernels pass: $(tail -n 1 "$LOGS/smoke_triton.txt")"
    if [[ $fallback_always == 1 ]]; then
      section smoke_pytorch "$(fixed_cap smoke_pytorch)"
      say "PyTorch path (rc ${RC[smoke_pytorch]}): $(tail -n 1 "$LOGS/smoke_pytorch.txt")"
    fi
    say "the sections below run the default path (Triton kernels on)"
  else
    section smoke_pytorch "$(fixed_cap smoke_pytorch)"
    if [[ ${RC[smoke_pytorch]} == 0 ]]; then
      export MMVIT5_TRITON=0
      say "the Triton kernels FAIL the smoke (rc ${RC[smoke_triton]}:" \
          "$(tail -n 1 "$LOGS/smoke_triton.txt")); the PyTorch path passes it: the sections" \
          "below run the PyTorch path (MMVIT5_TRITON=0 exported)"
    else
      say "ViT5 FAILS the smoke with the Triton kernels (rc ${RC[smoke_triton]}) and without" \
          "(rc ${RC[smoke_pytorch]}: $(tail -n 1 "$LOGS/smoke_pytorch.txt")); the sections" \
          "below run the default path and show where"
    fi
  fi
  while read -r name cap; do
    [[ -z $name ]] && continue
    if [[ $name == train_*_loop && ${RC[${name%_loop}]:-} != 0 ]]; then
      say "$name: skipped, ${name%_loop} did not finish (rc ${RC[${name%_loop}]:-not run})"
      continue
    fi
    section "$name" "$cap"
    case $name in
      pytest_*) say "$name: $(tail -n 1 "$LOGS/$name.txt")" ;;
      targets_* | detector_target) report '^\| ViT5' "$name" ;;
      train_*_loop) report '^\| vit5' "$name" ;;
      breakdown) report '^\| \*\*sum|\*\*total' "$name" ;;
    esac
  done <<< "$chosen"
  say "total $((SECONDS - start))s; rows in $ROWS, logs in $OUT_DIR/logs.tar.gz"
}
fixed_cap() { awk -v n="$1" '$1 == n {print $2}' <<< "$FIXED"; }
# the table lines of a section's log matching $1, into the summary
report() { grep -hE "$1" "$LOGS/$2.txt" | tee -a "$OUT_DIR/summary.txt"; }

if [[ $call != all && " $CALLS " != *" $call "* ]]; then
  echo "gpu_check: CALL must be one of $CALLS or all, got '$call'" >&2; exit 2
fi
[[ $dry == 1 ]] || { mkdir -p "$OUT_DIR" "$LOGS" && : > "$OUT_DIR/summary.txt"; }
status=0
if [[ -n ${SECTIONS:-} ]]; then
  run_call "SECTIONS='$SECTIONS'" 0 "$(selected)" || status=1
else
  for c in $CALLS; do
    [[ $call == all || $call == "$c" ]] || continue
    run_call "CALL=$c of ${CALLS##* }" "$([[ $c == 1 ]] && echo 1 || echo 0)" \
      "$(call=$c selected)" || status=1
  done
fi
[[ $dry == 1 ]] || cat "$OUT_DIR/summary.txt"
exit $status

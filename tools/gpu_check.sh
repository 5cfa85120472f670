#!/usr/bin/env bash
# The CUDA path, end to end, on a GPU machine that has only Python, torch and torchvision: no
# network, no compiler. One call fits one command of a lent GPU (10 minutes, the machine's
# start outside it): its sections' time caps sum to at most BUDGET (480 s).
#
#   here, with network:   bash tools/dev/make_wheels.sh .whl 3.12   (the pure-Python stack)
#   there:                bash tools/gpu_check.sh [WHEELS=.whl]
#   a second call:        SECTIONS='targets_compiled loop' bash tools/gpu_check.sh
#   anywhere:             DRY_RUN=1 bash tools/gpu_check.sh     (the plan, nothing run)
#   here, before:         REHEARSE=1 bash tools/gpu_check.sh    (the same call on the CPU)
#
# The sections, in order of value, each under its cap (PLAN below):
#   setup             installs the wheels offline (--no-deps) into the active Python, mmvit5
#                     from this checkout through a path file, runs tools/check_env.py, needs CUDA
#   smoke_triton      tools/gpu_smoke.py --triton 1: a two-block ViT5-B slice at 2x3x1024x1024
#                     trains one step in bf16 and in fp16 autocast against float32 on the CPU,
#                     and must run the Triton kernels (the plan says so, nothing fell back)
#   smoke_pytorch     the same with --triton 0, only when smoke_triton failed: if it passes,
#                     MMVIT5_TRITON=0 is exported for the rest and every row says so
#   pytest_cuda       pytest -m cuda (tests/test_cuda.py), one compile test of the two
#   targets           ViT5-B against timm ViT-B at 1024, batch 1, eager, bf16 autocast: training
#                     step, forward, peak training memory (each model alone), window 14 against
#                     global attention, flex windows against batched SDPA windows
#   targets_compiled  the torch.compile'd training pair
#   detector          the Mask R-CNN step against the same detector on mmpretrain's ViT-B
#   loop              tools/train.py (vit5_maskrcnn_coco.py --amp, LSJ 1024, generated data,
#                     batch 2) and its loop against the model-only step, with MFU
# A section that would start past BUDGET is named as skipped; SECTIONS='names or globs' runs
# only those after setup and the smoke (the second call's work). After the sections, the rows
# are checked: each says which path ran (plan, triton_failure), the path the call meant.
#
# REHEARSE=1 runs the same call on the CPU: a new venv (in WORK) holding only torch,
# torchvision and what make_wheels.sh says the GPU image has, the bundle made for that venv's
# Python and installed offline by setup itself, every section at tiny shapes (the smoke's
# Triton kernels through Triton's interpreter; each CUDA-only measurement replaced by its CPU
# counterpart, named so in its row), then the kernels compiled by the oldest Triton the install
# allows (TRITON_OLDEST). It exits non-zero if any of it fails. 10-17 min on 2 cores, with
# torch's wheels on disk; the venv is removed afterwards unless REHEARSE_KEEP=1.
#
# Files: OUT (default results/gpu_check; a lent machine's $OUT comes back, at most 8 files)
# gets, as they are written: rows.jsonl (every smoke case, row and target, the moment it is
# measured), sections.log (every section's output), summary.txt, and the JSON of targets,
# targets_compiled, detector and loop. WORK (default work_dirs/gpu_check) holds the generated
# data, plots and training work dirs (no checkpoint). MMVIT5_COMMIT names the commit where the
# copy has no .git.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
if [[ -n ${CALL:-} ]]; then
  echo "gpu_check: CALL=$CALL: there is one call now (bash tools/gpu_check.sh); a second" \
       "call's work is chosen with SECTIONS='names'" >&2
  exit 2
fi
export PY=${PYTHON:-python3} PYTHONUNBUFFERED=1
dry=${DRY_RUN:-0}
budget=${BUDGET:-480}
rehearsal=${GPU_CHECK_REHEARSAL:-0}  # set by REHEARSE=1 for the call it runs in its venv
# the caps are the GPU's; a rehearsal's 2 shared CPU cores get SCALE times each at run time
scale=${CAP_SCALE:-$([[ $rehearsal == 1 ]] && echo 8 || echo 1)}
export OUT_DIR=${OUT:-$here/results/gpu_check} WORK=${WORK:-$here/work_dirs/gpu_check}
export WHEELS=${1:-${WHEELS:-$here/.whl}} HERE=$here ITERS=${ITERS:-6}
export ROWS=$OUT_DIR/rows.jsonl TRITON_OLDEST=${TRITON_OLDEST:-3.2.0}
if [[ -z ${MMVIT5_COMMIT:-} ]] && git -C "$here" rev-parse --short HEAD >/dev/null 2>&1; then
  MMVIT5_COMMIT=$(git -C "$here" rev-parse --short HEAD)
fi
[[ -n ${MMVIT5_COMMIT:-} ]] && export MMVIT5_COMMIT

# section and cap in seconds, in order of value. On the H200 (results/gpu_h200): pytest -m
# cuda 31 s (before its compile test), the eager targets 27 s (before flex windows), the
# compiled pair 109 s, the detector 27 s, a training of 8 iterations 38 s. A section stopped
# by its cap can be rerun alone with more: SECTIONS=targets_compiled CAP_SCALE=2
PLAN='setup 35
smoke_triton 50
smoke_pytorch 30
pytest_cuda 65
targets 70
targets_compiled 130
detector 40
loop 60'

# the command of section $1, into the array CMD; tiny shapes on the CPU in a rehearsal
command_of() {
  local bench=("$PY" tools/benchmark.py --sizes none --peers none --dtype bfloat16
               --rows-log "$ROWS" --rows-tag "$1" --plot "$WORK/$1.png")
  local json=(--json "$OUT_DIR/$1.json") size=1024 rounds=10 cpu=()
  if [[ $rehearsal == 1 ]]; then
    size=64 rounds=1 cpu=(--device cpu --matmul-size 256)
  fi
  case $1 in
    setup) CMD=(setup_env) ;;
    smoke_triton | smoke_pytorch)
      CMD=("$PY" tools/gpu_smoke.py --triton "$([[ $1 == smoke_triton ]] && echo 1 || echo 0)"
           --rows-log "$ROWS" --rows-tag "$1")
      if [[ $rehearsal == 1 ]]; then CMD+=(--device cpu --tiny --steps 0); fi ;;
    pytest_cuda)
      # one compile test: the windowed one (it traces flex_attention and the Triton ops)
      CMD=("$PY" -m pytest -v --durations=0 -p no:cacheprovider -m cuda tests/test_cuda.py
           --deselect 'tests/test_cuda.py::test_compiled_blocks_with_the_fused_kernels_equal_eager[0]') ;;
    targets)
      CMD=("${bench[@]}" "${cpu[@]}" --targets "$size" --batch 1 --target-rounds "$rounds"
           "${json[@]}")
      if [[ $rehearsal == 1 ]]; then CMD+=(--cpu-counterparts); fi ;;
    targets_compiled)
      CMD=("${bench[@]}" "${cpu[@]}" --targets "$size" --batch 1 --target-compile
           --target-rounds "$((rounds / 2 + 1))" "${json[@]}")
      # Inductor's CPU code generation of two ViT-Bs takes many minutes on 2 cores
      if [[ $rehearsal == 1 ]]; then CMD+=(--compile-backend aot_eager); fi ;;
    detector)
      CMD=("${bench[@]}" "${cpu[@]}" --detector-targets "$([[ $rehearsal == 1 ]] && echo 128 \
           || echo 1024)" --batch "$([[ $rehearsal == 1 ]] && echo 1 || echo 2)"
           --target-rounds "$((rounds / 2 + 1))" "${json[@]}") ;;
    loop) CMD=(loop_section) ;;
    *) echo "gpu_check: no command for section '$1'" >&2; return 1 ;;
  esac
}

# install offline, mmvit5 from the checkout, the environment check, a CUDA device (exit 3)
setup_env() {
  if [[ $DRY_RUN == 1 ]]; then
    echo " install $WHEELS/*.whl offline, mmvit5 from $HERE, tools/check_env.py," \
         "$([[ $GPU_CHECK_REHEARSAL == 1 ]] && echo 'no CUDA (rehearsal)' || echo 'CUDA')"
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
  if [[ $GPU_CHECK_REHEARSAL == 1 ]]; then
    "$PY" -c "import torch; print('CPU (rehearsal: no CUDA needed), torch', torch.__version__)"
    return 0
  fi
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" \
    || { echo 'no CUDA device'; exit 3; }
  "$PY" -c "import torch; print(torch.cuda.get_device_name(), 'torch', torch.__version__)"
}

# tools/train.py on generated data (made on first use, no checkpoint written: the final save
# alone is 1.3 GB for ViT5-B), then its loop against the model-only step. The rehearsal trains
# at 128 on the CPU without --amp (mmengine's AmpOptimWrapper needs a GPU)
loop_section() {
  local config=configs/vit5_maskrcnn_coco.py size=1024 batch=2 amp=(--amp) data=$WORK/data/coco/
  local resize=()
  if [[ $GPU_CHECK_REHEARSAL == 1 ]]; then
    size=128 batch=1 amp=()
    resize=("train_dataloader.dataset.pipeline.2.scale=($size,$size)"
            "train_dataloader.dataset.pipeline.3.crop_size=($size,$size)"
            "model.data_preprocessor.batch_augments.0.size=($size,$size)")
  fi
  local opts=(model.backbone.init_cfg=None train_dataloader.num_workers=2
              train_cfg.max_iters="$ITERS" train_cfg.val_interval=$((ITERS + 1))
              train_cfg.val_begin=$((ITERS + 1))
              default_hooks.logger.interval=1 default_hooks.checkpoint.interval=$((ITERS + 1))
              default_hooks.checkpoint.save_last=False train_dataloader.batch_size="$batch"
              train_dataloader.dataset.data_root="$data" val_dataloader.dataset.data_root="$data"
              test_dataloader.dataset.data_root="$data"
              val_evaluator.ann_file="${data}annotations/instances_val2017.json"
              test_evaluator.ann_file="${data}annotations/instances_val2017.json" "${resize[@]}")
  local split
  for split in train val test; do
    opts+=("${split}_dataloader.dataset.metainfo.classes=(rectangle,ellipse,triangle)")
  done
  local train=("$PY" tools/train.py "$config" "${amp[@]}" --work-dir "$WORK/loop" --cfg-options
               "${opts[@]}")
  local loop=("$PY" tools/benchmark.py --sizes none --peers none --dtype bfloat16 --batch "$batch"
              --target-rounds 4 --full-size "$size" --train-log "$WORK/train.log:$config:vit5-b"
              --rows-log "$ROWS" --rows-tag loop --json "$OUT_DIR/loop.json")
  if [[ $GPU_CHECK_REHEARSAL == 1 ]]; then
    loop+=(--device cpu --dtype float32 --target-rounds 1)
  fi
  if [[ $DRY_RUN == 1 ]]; then
    printf ' %q' "${train[@]}"; printf ' >%q; ' "$WORK/train.log"; printf ' %q' "${loop[@]}"; echo
    return 0
  fi
  set -eo pipefail
  [[ -f ${data}annotations/instances_val2017.json ]] \
    || "$PY" tools/make_toy_data.py "$WORK/data" --train 8 --val 2 --size "$size" > /dev/null
  "${train[@]}" 2>&1 | tee "$WORK/train.log" | grep -E 'execution plan|Iter\(train\)'
  "${loop[@]}"
}

say() {
  printf '[gpu_check] %s\n' "$*"
  [[ $dry == 1 ]] || printf '[gpu_check] %s\n' "$*" >> "$OUT_DIR/summary.txt"
}
declare -A RC=()

# section NAME CAP: its command under CAP seconds, its output appended to OUT's sections.log as
# it comes (and kept in WORK for the summary), its [row] lines printed
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
  local left=$((budget * scale - (SECONDS - start)))
  cap=$((cap * scale))
  if ((left < cap)); then
    say "$name: skipped, past the budget (${left}s left of $((budget * scale))s, cap ${cap}s)"
    RC[$name]=skipped
    return 0
  fi
  say "$name: starting, at most ${cap}s"
  printf '\n===== %s (cap %ss)\n' "$name" "$cap" >> "$OUT_DIR/sections.log"
  local t0=$SECONDS rc
  if declare -F "${CMD[0]}" > /dev/null; then  # a function of this script: in a child bash
    CMD=(bash -c "$(declare -f setup_env loop_section); \"\$@\"" "$name" "${CMD[@]}")
  fi
  timeout -k 5 "$cap" "${CMD[@]}" 2>&1 | tee -a "$OUT_DIR/sections.log" \
    | tee "$WORK/$name.txt" | grep --line-buffered '^\[row\]'
  rc=${PIPESTATUS[0]}
  RC[$name]=$rc
  say "$name: rc $rc after $((SECONDS - t0))s$( ((rc == 124 || rc == 137)) && echo ' (time cap)')"
}

# the plan's sections, in order: all of them, or setup, the smoke and those SECTIONS names
selected() {
  local name cap pattern patterns
  patterns=${SECTIONS:-}
  read -ra patterns <<< "${patterns//,/ }"  # no glob expansion: the patterns match names
  while read -r name cap; do
    if [[ -z ${SECTIONS:-} || $name == setup || $name == smoke_* ]]; then
      echo "$name $cap"
      continue
    fi
    for pattern in "${patterns[@]}"; do
      # shellcheck disable=SC2053
      [[ $name == $pattern ]] && echo "$name $cap" && break
    done
  done <<< "$PLAN"
}

# the plan, printed (in a dry run with each section's command); its last line is exactly
# 'plan: N sections, caps sum S s'
print_plan() {
  local chosen=$1 name cap total=0 count=0
  say "budget ${budget}s$([[ -n ${SECTIONS:-} ]] && echo ", SECTIONS='$SECTIONS'"); a lent GPU" \
      "runs one command for at most 600 s$([[ $rehearsal == 1 ]] \
      && echo '; a REHEARSAL on the CPU at tiny shapes')"
  while read -r name cap; do
    if ((total + cap > budget)); then
      say "skipped: $name ${cap}s, past the budget"
      continue
    fi
    total=$((total + cap)) count=$((count + 1))
    if [[ $dry == 1 ]]; then
      section "$name" "$cap"
    else
      say "  $name ${cap}s"
    fi
    [[ $name == smoke_pytorch ]] && say "  (smoke_pytorch runs only if smoke_triton fails)"
  done <<< "$chosen"
  ((scale == 1)) || say "each cap x$scale at run time: at most $((total * scale)) s in all"
  echo "plan: $count sections, caps sum $total s"
  [[ $dry == 1 ]] || echo "plan: $count sections, caps sum $total s" >> "$OUT_DIR/summary.txt"
}

run_call() {
  local chosen name cap fused
  chosen=$(selected)
  print_plan "$chosen"
  [[ $dry == 1 ]] && return 0
  start=$SECONDS
  RC=()
  say "commit ${MMVIT5_COMMIT:-not recorded (set MMVIT5_COMMIT)}, rows to $ROWS"
  section setup "$(awk '$1 == "setup" {print $2}' <<< "$PLAN")"
  if [[ ${RC[setup]} != 0 ]]; then
    say "setup failed (rc ${RC[setup]}): $(tail -n 3 "$WORK/setup.txt" | tr '\n' ' ')"
    return 1
  fi
  say "$(tail -n 1 "$WORK/setup.txt")"
  while read -r name cap; do
    [[ -z $name || $name == setup ]] && continue
    if [[ $name == smoke_pytorch ]]; then
      [[ ${RC[smoke_triton]} == 0 ]] && continue
      section smoke_pytorch "$cap"
      if [[ ${RC[smoke_pytorch]} == 0 ]]; then
        export MMVIT5_TRITON=0
        say "the Triton kernels FAIL the smoke (rc ${RC[smoke_triton]}:" \
            "$(tail -n 1 "$WORK/smoke_triton.txt")); the PyTorch path passes it: the sections" \
            "below run the PyTorch path (MMVIT5_TRITON=0 exported; every row's plan says so)"
      else
        say "ViT5 FAILS the smoke on Triton (rc ${RC[smoke_triton]}) and on PyTorch" \
            "(rc ${RC[smoke_pytorch]}: $(tail -n 1 "$WORK/smoke_pytorch.txt"))"
      fi
      continue
    fi
    section "$name" "$cap"
    case $name in
      smoke_triton) [[ ${RC[$name]} == 0 ]] \
        && say "Triton kernels pass: $(tail -n 1 "$WORK/$name.txt")" ;;
      pytest_cuda) say "$name: $(tail -n 1 "$WORK/$name.txt")"
        compile_tests=$(grep -c 'test_compiled_blocks.* \(PASSED\|FAILED\|SKIPPED\|ERROR\)' \
                        "$WORK/$name.txt")
        [[ $compile_tests == 1 ]] || { say "$name: $compile_tests compile tests ran, want 1"
                                       RC[$name]=1; } ;;
      targets*|detector) grep -hE '^\| ViT5' "$WORK/$name.txt" >> "$OUT_DIR/summary.txt" ;;
      loop) grep -hE '^\| vit5' "$WORK/$name.txt" >> "$OUT_DIR/summary.txt" ;;
    esac
  done <<< "$chosen"
  # the rows must say the path the call meant: Triton on CUDA unless the smoke chose PyTorch;
  # a rehearsal's later sections run the CPU's own path, PyTorch (the interpreter would take
  # minutes per ViT-B step)
  fused=Triton
  [[ ${MMVIT5_TRITON:-} == 0 || $rehearsal == 1 ]] && fused=PyTorch
  "$PY" -m benchmarks.rowlog "$OUT_DIR" --fused "$fused" 2>&1 | tee -a "$OUT_DIR/summary.txt"
  RC[rows]=${PIPESTATUS[0]}
  say "total $((SECONDS - start))s; rows in $ROWS, every section's output in" \
      "$OUT_DIR/sections.log"
  local failed=0
  for name in "${!RC[@]}"; do
    [[ ${RC[$name]} == 0 || ${RC[$name]} == skipped ]] && continue
    say "FAILED: $name (rc ${RC[$name]})"
    failed=1
  done
  return $failed
}

# REHEARSE=1: the venv, the bundle, the call in it, then the kernels on the oldest Triton
rehearse() {
  local dir=$WORK/rehearsal venv rc=0 name pins=()
  rm -rf "$dir" && mkdir -p "$dir"
  venv=$dir/venv
  echo "[rehearse] a new venv in $venv: torch, torchvision and the GPU image's packages"
  "$PY" -m venv "$venv" || return 1
  for name in torch torchvision $(bash tools/dev/make_wheels.sh --image); do
    pins+=("$name$("$PY" -c "import importlib.metadata as m, sys
try: print('==' + m.version(sys.argv[1]).split('+')[0])
except m.PackageNotFoundError: print('')" "$name")")
  done
  # (pip names each local index folder a package is missing from: left out)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" 2>&1 \
    | grep -v 'is neither a file nor a directory'
  ((PIPESTATUS[0] == 0)) || return 1
  echo "[rehearse] the bundle for $("$venv/bin/python" -V)"
  bash tools/dev/make_wheels.sh "$dir/whl" "$("$venv/bin/python" -c \
    'import sys; print("%d.%d" % sys.version_info[:2])')" 2>&1 \
    | grep -v 'is neither a file nor a directory'
  ((PIPESTATUS[0] == 0)) || return 1
  env -u PYTHONPATH -u MMVIT5_TRITON -u TRITON_INTERPRET PYTHON="$venv/bin/python" \
    GPU_CHECK_REHEARSAL=1 OUT="$OUT_DIR" WORK="$dir/work" WHEELS="$dir/whl" ITERS=2 \
    bash tools/gpu_check.sh || rc=1
  echo "[rehearse] the kernels compiled by Triton $TRITON_OLDEST (torch 2.6's, the oldest the" \
       "install allows) for sm_90"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target \
    "$dir/triton-oldest" "triton==$TRITON_OLDEST" 2> "$dir/triton-oldest.txt" \
    && env PYTHONPATH="$dir/triton-oldest" "$venv/bin/python" -m benchmarks.kernel_compile \
      --archs 90 --widths 768 --modes 'bf16 autocast' > "$dir/triton-oldest.txt" 2>&1 \
    || { tail -n 5 "$dir/triton-oldest.txt"; echo "[rehearse] FAILED on Triton $TRITON_OLDEST"
         rc=1; }
  echo "[rehearse] $([[ $rc == 0 ]] && echo passed || echo FAILED) in ${SECONDS}s; the call's" \
       "files in $OUT_DIR"
  [[ ${REHEARSE_KEEP:-0} == 1 ]] || rm -rf "$venv"  # 6 GB of torch and CUDA libraries
  return $rc
}

if [[ ${REHEARSE:-0} == 1 && $rehearsal == 0 ]]; then
  OUT_DIR=${OUT:-$WORK/rehearsal/out}
  rm -rf "$OUT_DIR"
  rehearse
  exit $?
fi
if [[ $dry == 0 ]]; then
  mkdir -p "$OUT_DIR" "$WORK" && : > "$OUT_DIR/summary.txt" && : > "$OUT_DIR/sections.log"
fi
export GPU_CHECK_REHEARSAL=$rehearsal DRY_RUN=$dry
run_call
status=$?
[[ $dry == 1 ]] || cat "$OUT_DIR/summary.txt"
exit $status

#!/usr/bin/env bash
# Install mmvit5 and its pinned OpenMMLab stack into the active Python. No compiler needed.
#
# Idempotent: when everything is already installed this is one check and nothing else.
#   1. torch: an installed torch inside the supported range (requirements/runtime.txt) is kept
#      with its torchvision (GPU users bring their CUDA build); none installed -> the default
#      pair below.
#   2. mmcv 2.1.0: by default its Python-only build (`MMCV_WITH_OPS=0`, distribution name
#      `mmcv-lite`, ~15 s); mmvit5 serves the compiled ops it needs from torchvision. With
#      MMCV_OPS=compiled, its C++ (and with FORCE_CUDA=1, CUDA) ops are built against the
#      installed torch instead (13-19 min on 2 cores). Either wheel is cached per torch.
#   3. mmengine, mmdet, mmsegmentation, mmpretrain and the rest of the runtime, with every extra
#      of setup.py (tests, benchmark, deploy, docs, hf: requirements.txt lists their files), since
#      the quickstart and the test suite use them all; transformers pinned at 5.25.0.
#   4. mmvit5 itself (editable) and its start-up file `mmvit5-mmcv-ext.pth`, which lets every
#      Python process of the environment import mmcv.ops without compiled ops.
#
# Environment:
#   PYTHON        interpreter to install into (default: python3)
#   MMCV_OPS      torchvision (default) | compiled
#   FORCE_CUDA    1 to build mmcv's CUDA ops with MMCV_OPS=compiled (needs nvcc matching torch)
#   MAX_JOBS      parallel compile jobs for MMCV_OPS=compiled (default: number of cores)
#   MMVIT5_CACHE  where built mmcv wheels are kept (default: ~/.cache/mmvit5)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
OPS=${MMCV_OPS:-torchvision}
MMCV_VERSION=2.1.0
TORCH_DEFAULT=(torch==2.14.1 torchvision==0.29.1)  # the pair CI runs; inside the range
pip=("$PY" -m pip --disable-pip-version-check -q)
say() { printf '[install] %s\n' "$*"; }
case "$OPS" in torchvision|compiled) ;; *)
  say "MMCV_OPS=$OPS is not a choice: use MMCV_OPS=torchvision (default, no compiler) or MMCV_OPS=compiled"
  exit 2 ;;
esac

EXTRAS=tests,benchmark,deploy,docs,hf  # the extras of setup.py that requirements.txt installs
# the versions of the hf extra's ranges (requirements/hf.txt) that CI runs
HF_PINS=(transformers==5.25.0 accelerate==1.16.0)

# 0. Already done? One check covers versions, extras, the mmcv ops backend and this checkout.
if "$PY" "$here/tools/check_env.py" --quiet --repo "$here" --mmcv-ops "$OPS" --extras "$EXTRAS" \
    2>/dev/null; then
  say "environment already complete (tools/check_env.py); nothing to do"
  exit 0
fi
start=$(date +%s)

# 1. torch + torchvision: keep what is installed when check_env accepts it.
if "$PY" -c "import torch, torchvision" 2>/dev/null; then
  "$PY" "$here/tools/check_env.py" --repo "$here" --torch-only || exit 1
  say "step 1/4: keeping torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  say "step 1/4: no torch installed: ${TORCH_DEFAULT[*]}"
  "${pip[@]}" install "${TORCH_DEFAULT[@]}"
fi

# 2. mmcv, built once per (flavour, torch, Python ABI, CUDA) and cached.
if "$PY" "$here/tools/check_env.py" --repo "$here" --mmcv-ops "$OPS" --mmcv-only --quiet 2>/dev/null; then
  say "step 2/4: mmcv $MMCV_VERSION ($OPS ops) already installed"
  wheel=""
else
  key=$(OPS=$OPS "$PY" -c "import os, sys, sysconfig, torch
if os.environ['OPS'] == 'torchvision':
    print('lite')  # pure Python: one wheel serves every torch
else:
    cuda = 'cu' + torch.version.cuda.replace('.', '') if torch.version.cuda and os.environ.get('FORCE_CUDA') == '1' else 'cpu'
    print(f'torch{torch.__version__}-{sysconfig.get_config_var(\"SOABI\")}-{cuda}'.replace('+', '_'))")
  cache=${MMVIT5_CACHE:-$HOME/.cache/mmvit5}/mmcv-$MMCV_VERSION/$key
  wheel=$(ls "$cache"/mmcv*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    # a fresh Python's setuptools may predate its own bdist_wheel; ninja parallelises the C++
    "${pip[@]}" install "$(grep -E '^setuptools' "$here/requirements/runtime.txt")" wheel \
      $([ "$OPS" = compiled ] && echo ninja)
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    "${pip[@]}" download --no-deps --no-binary :all: --no-build-isolation "mmcv==$MMCV_VERSION" -d "$build"
    tar -xzf "$build/mmcv-$MMCV_VERSION.tar.gz" -C "$build"
    src="$build/mmcv-$MMCV_VERSION"
    log="$build/build.log"
    if [ "$OPS" = torchvision ]; then
      say "step 2/4: building mmcv $MMCV_VERSION without compiled ops (seconds)"
      (cd "$src" && MMCV_WITH_OPS=0 "$PY" setup.py bdist_wheel -d "$build/dist" >"$log" 2>&1) \
        || { tail -n 40 "$log"; say "mmcv build failed"; exit 1; }
    else
      # torch >= 2.10's ATen headers refuse anything below C++20; mmcv 2.1.0 hard-codes C++17.
      "$PY" - "$src/setup.py" <<'PYEOF'
import sys
import torch
path = sys.argv[1]
text = open(path).read()
if tuple(int(v) for v in torch.__version__.split('.')[:2]) >= (2, 10):
    text = text.replace("'-std=c++17'", "'-std=c++20'").replace("'/std:c++17'", "'/std:c++20'")
open(path, 'w').write(text)
PYEOF
      say "step 2/4: compiling mmcv $MMCV_VERSION against $key (about 13 min on 2 cores)"
      say "compiler log: $log (progress below: [done/total] objects)"
      (cd "$src" && MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
        "$PY" setup.py bdist_wheel -d "$build/dist" >"$log" 2>&1) &
      pid=$!
      last=""
      while kill -0 "$pid" 2>/dev/null; do
        sleep 20
        cur=$(grep -oE '^\[[0-9]+/[0-9]+\]' "$log" | tail -n 1 || true)
        [ "$cur" != "$last" ] && say "mmcv build ${cur:-configuring} after $(($(date +%s) - start)) s" || true
        last=$cur
      done
      wait "$pid" || { tail -n 40 "$log"; say "mmcv build failed; log kept at $log"; trap - EXIT; exit 1; }
    fi
    mkdir -p "$cache"
    cp "$build"/dist/mmcv*.whl "$cache"/
    wheel=$(ls "$cache"/mmcv*.whl | head -n 1)
    say "built $wheel"
  else
    say "step 2/4: reusing mmcv wheel built for $key: $wheel"
  fi
  # mmcv and mmcv-lite install the same `mmcv` package: remove either before the other lands
  "${pip[@]}" uninstall -y mmcv mmcv-lite >/dev/null 2>&1 || true
fi

# 3. The rest of the pinned stack, resolved together with the new mmcv wheel (its runtime
#    dependencies, e.g. opencv, come with it). --no-cache-dir: pip's wheel cache does not key
#    on the torch version.
say "step 3/4: mmengine, mmdet, mmsegmentation, mmpretrain, helpers and extras"
"${pip[@]}" install --no-cache-dir -r "$here/requirements.txt" "${HF_PINS[@]}" ${wheel:+"$wheel"}
# panoptic evaluation (CocoPanopticMetric): the part of the COCO panoptic API that mmdet
# imports, third_party/panopticapi (numpy only). It replaces panopticapi-lite, which declares
# numpy<2 and scikit-image and so failed `pip check` beside opencv's numpy 2.
"${pip[@]}" uninstall -y panopticapi-lite >/dev/null 2>&1 || true
"${pip[@]}" install --no-cache-dir --no-build-isolation "$here/third_party/panopticapi"

# 4. mmvit5 itself, editable, so custom_imports=['mmvit5'] works from any directory, and the
#    start-up file (editable installs carry no files outside the package path).
say "step 4/4: mmvit5 (editable) and its mmcv.ops start-up file"
"${pip[@]}" install --no-deps --no-build-isolation -e "$here"
"$PY" "$here/_mmvit5_hook.py" >/dev/null

"$PY" "$here/tools/check_env.py" --repo "$here" --mmcv-ops "$OPS" --extras "$EXTRAS"
say "done in $(($(date +%s) - start)) s"

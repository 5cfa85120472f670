#!/usr/bin/env bash
# Install mmvit5 and its pinned OpenMMLab stack into the active Python.
#
# Idempotent: when everything is already installed this is a quick check and nothing else.
# Order matters: torch first, then mmcv built from source *against that torch* (no mmcv 2.1.0
# wheel exists for torch 2.14), then mmdet/mmseg/mmpretrain and the rest.
#
# Environment:
#   PYTHON      interpreter to install into (default: python3)
#   FORCE_CUDA  1 to build mmcv's CUDA ops (a GPU machine with nvcc and a CUDA torch)
#   MAX_JOBS    parallel compile jobs for mmcv (default: number of cores)
#   MMVIT5_CACHE  where built mmcv wheels are kept (default: ~/.cache/mmvit5)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
pip=("$PY" -m pip --disable-pip-version-check -q)
req="$here/requirements.txt"
pin() { grep -E "^$1[=<>]" "$req" | head -n 1; }

say() { printf '[install] %s\n' "$*"; }

# 0. Already done? One import check covers versions, compiled ops and this checkout.
if "$PY" "$here/tools/check_env.py" --quiet --repo "$here" 2>/dev/null; then
  say "environment already complete (tools/check_env.py); nothing to do"
  exit 0
fi

# 1. torch + build tooling. torch/torchvision are the CPU-machine pins; a GPU user installs
#    their own CUDA torch first and this step leaves it alone when the versions match.
say "step 1/4: torch, torchvision, build tools"
"${pip[@]}" install "$(pin torch)" "$(pin torchvision)" "$(pin setuptools)" wheel ninja psutil

# 2. mmcv with compiled ops, built once per (torch, Python ABI, CUDA) and cached.
mmcv_pin=$(pin mmcv)
mmcv_ver=${mmcv_pin#mmcv==}
if "$PY" -c "import mmcv, mmcv._ext, sys; sys.exit(mmcv.__version__ != '$mmcv_ver')" 2>/dev/null; then
  say "step 2/4: mmcv $mmcv_ver with compiled ops already installed"
else
  key=$("$PY" -c "import sys, sysconfig, torch, os
cuda = ('cu' + torch.version.cuda.replace('.', '')) if (torch.version.cuda and os.environ.get('FORCE_CUDA') == '1') else 'cpu'
print(f'torch{torch.__version__}-{sysconfig.get_config_var(\"SOABI\")}-{cuda}'.replace('+', '_'))")
  cache=${MMVIT5_CACHE:-$HOME/.cache/mmvit5}/mmcv-$mmcv_ver/$key
  wheel=$(ls "$cache"/mmcv-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    say "step 2/4: building mmcv $mmcv_ver from source against $key (about 13 min on 2 cores)"
    "${pip[@]}" download --no-deps --no-binary :all: --no-build-isolation "$mmcv_pin" -d "$build"
    tar -xzf "$build"/mmcv-"$mmcv_ver".tar.gz -C "$build"
    src="$build/mmcv-$mmcv_ver"
    # torch >= 2.10's ATen headers refuse anything below C++20; mmcv 2.1.0 hard-codes C++17.
    "$PY" - "$src/setup.py" <<'PYEOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
import torch
major, minor = (int(v) for v in torch.__version__.split('.')[:2])
if (major, minor) >= (2, 10):
    text = text.replace("'-std=c++17'", "'-std=c++20'").replace("'/std:c++17'", "'/std:c++20'")
open(path, 'w').write(text)
PYEOF
    log="$build/build.log"
    say "compiler log: $log (progress below: [done/total] objects)"
    (
      cd "$src"
      MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" setup.py bdist_wheel -d "$build/dist" >"$log" 2>&1
    ) &
    pid=$!
    start=$(date +%s)
    last=""
    while kill -0 "$pid" 2>/dev/null; do
      sleep 20
      cur=$(grep -oE '^\[[0-9]+/[0-9]+\]' "$log" | tail -n 1 || true)
      [ "$cur" != "$last" ] && say "mmcv build ${cur:-configuring} after $(($(date +%s) - start)) s" || true
      last=$cur
    done
    if ! wait "$pid"; then
      tail -n 40 "$log"
      say "mmcv build failed; full log kept at $log"
      trap - EXIT
      exit 1
    fi
    mkdir -p "$cache"
    cp "$build"/dist/mmcv-*.whl "$cache"/
    wheel=$(ls "$cache"/mmcv-*.whl | head -n 1)
    say "built $wheel"
  else
    say "step 2/4: reusing mmcv wheel built for $key: $wheel"
  fi
  # --no-cache-dir: pip's own wheel cache does not key on the torch version.
  "${pip[@]}" install --no-cache-dir --force-reinstall --no-deps "$wheel"
fi

# 3. The rest of the pinned stack (mmcv is already satisfied, so pip never builds it again;
#    this also brings mmcv's own runtime dependencies, e.g. opencv, which `import mmcv` needs).
say "step 3/4: mmengine, mmdet, mmsegmentation, mmpretrain, fairscale and helpers"
"${pip[@]}" install -r "$req"
"$PY" -c "import mmcv._ext" || { say "mmcv installed without compiled ops (mmcv._ext missing)"; exit 1; }

# 4. mmvit5 itself, editable, so custom_imports=['mmvit5'] works from any directory.
say "step 4/4: mmvit5 (editable)"
"${pip[@]}" install --no-deps --no-build-isolation -e "$here"

"$PY" "$here/tools/check_env.py" --repo "$here"

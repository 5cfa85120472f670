#!/usr/bin/env bash
# Collect, on a machine with network, the wheels that tools/gpu_check.sh installs on a CUDA
# machine that has Python, torch and torchvision but no network and no OpenMMLab packages.
#
#   bash tools/dev/make_wheels.sh [OUT=.whl] [PYTHON_VERSION=3.12]
#   bash tools/dev/make_wheels.sh --image     # the packages the GPU image has already, one a line
#
# Versions are the ones installed here (the tested stack). Pure-Python packages come as
# py3 wheels (built here from sdists where PyPI has no wheel: mmcv-lite, fvcore);
# the compiled ones (pycocotools, shapely, faster-coco-eval) are fetched for PYTHON_VERSION on
# manylinux x86_64. IMAGE lists what the lent GPU image has (its package list in the device
# notes, read 2026-11-17): the bundle leaves those out, and REHEARSE=1 bash tools/gpu_check.sh
# rehearses the call in a new venv holding torch, torchvision and IMAGE alone, so a package
# that is in neither list fails there, not on the GPU. The bundle stays well under 64 MiB.
set -euo pipefail
IMAGE=(numpy scipy matplotlib opencv-python-headless pillow pyyaml regex rich tqdm packaging six
       requests tabulate portalocker pytest markdown onnx onnxruntime onnxscript onnx-ir
       ml-dtypes huggingface-hub safetensors)
if [[ ${1:-} == --image ]]; then printf '%s\n' "${IMAGE[@]}"; exit 0; fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)  # the checkout
out=$(mkdir -p "${1:-$here/.whl}" && cd "${1:-$here/.whl}" && pwd)
pyver=${2:-3.12}
PY=${PYTHON:-python3}
pip=("$PY" -m pip --disable-pip-version-check -q)
# pytest-xdist: the tests extra's parallel runner (tools/check_env.py imports it); the panoptic
# API is built from third_party/panopticapi below
PURE=(mmengine mmdet mmsegmentation mmpretrain ftfy wcwidth fvcore iopath yacs
      termcolor addict yapf platformdirs terminaltables prettytable mat4py modelindex
      model-index ordered-set importlib-metadata lazy-importer timm einops
      pytest-xdist execnet)
BINARY=(pycocotools shapely faster-coco-eval)
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }

rm -f "$out"/*.whl
for name in "${PURE[@]}"; do
  "${pip[@]}" wheel --no-deps -w "$out" "$name==$(version "$name")"
done
"${pip[@]}" wheel --no-deps --no-build-isolation -w "$out" "$here/third_party/panopticapi"
for name in "${BINARY[@]}"; do
  "${pip[@]}" download --no-deps --only-binary=:all: -d "$out" --python-version "$pyver" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$name==$(version "$name")"
done
# mmcv's Python-only wheel, as tools/install.sh builds and caches it
lite=$(ls "${MMVIT5_CACHE:-$HOME/.cache/mmvit5}"/mmcv-2.1.0/lite/mmcv*.whl 2>/dev/null | head -n 1)
[ -n "$lite" ] || { echo "[make_wheels] no cached mmcv-lite wheel: run bash tools/install.sh first"; exit 1; }
cp "$lite" "$out"/
echo "[make_wheels] $(ls "$out"/*.whl | wc -l) wheels, $(du -sh "$out" | cut -f1) in $out"

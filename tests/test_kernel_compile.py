"""The Triton kernels compile for sm_80 and sm_90 with Triton's real compiler (no GPU needed):
every kernel a ViT5 block launches, in every mode, with no register spill and within the GPU's
shared memory (python -m benchmarks.kernel_compile; the interpreter tests check the values)."""
import importlib.util
import json
import os
import sys

import pytest

from conftest import REPO, run_tool
from mmvit5.models.layers.kernels import HAS_TRITON

pytestmark = pytest.mark.skipif(
    not HAS_TRITON or importlib.util.find_spec('triton.backends.nvidia') is None,
    reason="triton with its CUDA backend (the CUDA torch wheel's) does not import")

KERNEL_MODULES = ('qk_norm_rope_triton', 'rms_norm_triton', 'layer_scale_triton')


def launched_kernels() -> set:
    """The kernels the modules launch: their @triton.jit functions named ``*_kernel``."""
    names = set()
    for module in KERNEL_MODULES:
        with open(os.path.join(REPO, 'mmvit5/models/layers/kernels', module + '.py')) as f:
            text = f.read()
        names |= {line.split('(')[0][len('def '):] for line in text.splitlines()
                  if line.startswith('def _') and line.split('(')[0].endswith('_kernel')}
    return names


def test_every_kernel_compiles_for_sm80_and_sm90_without_spills(tmp_path):
    out = tmp_path / 'kernels.json'
    # a cache of its own: compiled now, not found from an earlier run; TRITON_INTERPRET=1
    # (conftest.py) is inherited and the tool drops it
    log = run_tool([sys.executable, '-m', 'benchmarks.kernel_compile', '--widths', '384,1024',
                    '--json', str(out)],
                   cwd=REPO, env=dict(TRITON_CACHE_DIR=str(tmp_path / 'cache')))
    found = json.loads(out.read_text())['kernels']
    expected = launched_kernels()
    assert len(expected) == 5, expected
    for arch in (80, 90):
        for mode in ('float32', 'bf16 autocast', 'fp16 autocast', 'bfloat16'):
            built = {k['kernel'] for k in found if k['arch'] == arch and k['mode'] == mode}
            assert built == expected, (arch, mode, built)
    assert all(k['cubin_bytes'] > 0 and k['spill_bytes'] == 0 for k in found), log
    # the autocast modes build the kernels for half-precision activations
    assert any('bf16' in k['pointers'] for k in found if k['mode'] == 'bf16 autocast')

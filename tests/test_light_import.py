"""``import mmvit5`` is light: it imports no torch and no library, and what belongs to a library
happens when that library is imported (mmvit5/__init__.py, :mod:`mmvit5.utils.after_import`),
whichever comes first."""
import json
import re
import statistics
import subprocess
import sys

from conftest import REPO

# what `import mmvit5` must not import (issue 45): torch and numpy, mmengine, the task
# libraries, the export and plotting stacks
HEAVY = ('torch', 'numpy', 'mmengine', 'mmcv', 'matplotlib', 'mmdet', 'mmseg', 'mmpretrain',
         'onnx', 'timm', 'torchvision', 'transformers', 'PIL')
IMPORT_SECONDS = 1.0  # issue 45, for `python -X importtime -c 'import mmvit5'`
# what each step of a process registers, as an mmdet config's custom_imports sees it
PROBE = '''
import importlib, json, sys
from mmengine.registry import HOOKS, METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS
for step in sys.argv[1:]:
    importlib.import_module(step)
    print(json.dumps(dict(step=step, modules=sorted(sys.modules), registered=[
        name for name, registry in (('ViT5', MODELS), ('SimpleFeaturePyramid', MODELS),
                                    ('RNGStateHook', HOOKS), ('FasterCocoMetric', METRICS),
                                    ('ViT5LayerDecayOptimizerConstructor',
                                     OPTIM_WRAPPER_CONSTRUCTORS))
        if registry.get(name) is not None])))
'''


def test_import_is_light_and_the_rest_comes_with_its_library():
    """``import mmvit5`` registers nothing yet; mmengine's models bring the backbone,
    mmengine's runner the hooks and the optimizer constructor, mmdet's models (and mmcv.cnn) the
    neck and the COCO metric."""
    out = subprocess.run([sys.executable, '-c', 'import sys, mmvit5; print(sorted(sys.modules))'],
                         cwd=REPO, capture_output=True, text=True, check=True)
    modules = set(eval(out.stdout))
    assert [m for m in modules if m.split('.')[0] in HEAVY] == []
    out = subprocess.run([sys.executable, '-c', PROBE, 'mmvit5', 'mmengine.model',
                          'mmengine.runner', 'mmdet.models'], cwd=REPO, capture_output=True,
                         text=True, check=True)
    light, model, runner, mmdet = (json.loads(line) for line in out.stdout.splitlines()[-4:])
    assert light['registered'] == [] and model['registered'] == ['ViT5']
    assert runner['registered'] == ['ViT5', 'RNGStateHook', 'ViT5LayerDecayOptimizerConstructor']
    assert mmdet['registered'] == ['ViT5', 'SimpleFeaturePyramid', 'RNGStateHook',
                                   'FasterCocoMetric', 'ViT5LayerDecayOptimizerConstructor']


def test_a_look_up_before_the_import_keeps_what_waits_for_it():
    """``importlib.util.find_spec`` (mmvit5.compat and mmengine probe packages so) finds the
    package through the waiting finder without loading it: the registration must still come
    with the import that follows. With transformers installed, mmengine's runner registers its
    ``Adafactor`` as mmengine does on import, although ``import mmvit5`` kept transformers out."""
    code = (
        'import importlib.util, sys\n'
        'import mmvit5\n'
        'assert importlib.util.find_spec("timm") is not None\n'
        'import timm\n'
        'assert "mmvit5.timm" in sys.modules\n'
        'assert "vit5_small_patch16_224" in timm.list_models("vit5*")\n'
        'import mmengine.runner\n'
        'from mmengine.registry import OPTIMIZERS\n'
        'if importlib.util.find_spec("transformers") is not None:\n'
        '    assert "transformers" not in sys.modules\n'
        '    import torch\n'
        '    built = OPTIMIZERS.build(dict(type="Adafactor", params=[torch.nn.Parameter(\n'
        '        torch.zeros(2))], lr=1e-3, relative_step=False))\n'
        '    assert type(built).__module__.startswith("transformers"), type(built)\n'
        '    assert "mmvit5.hf" in sys.modules\n'
        'print("ok")\n')
    out = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith('ok'), out.stderr[-3000:]


def test_import_takes_under_a_second():
    """The figure of issue 45, measured as it asks (``-X importtime``, after a warm-up run),
    the median of three runs: the import takes about 0.1 s, so the bound is far from noise."""
    def seconds() -> float:
        out = subprocess.run([sys.executable, '-X', 'importtime', '-c', 'import mmvit5'],
                             cwd=REPO, capture_output=True, text=True, check=True)
        cumulative = re.search(r'\|\s*(\d+) \| mmvit5$', out.stderr, re.M)
        return int(cumulative.group(1)) / 1e6

    seconds()  # warm-up: the file system's caches
    assert statistics.median(seconds() for _ in range(3)) <= IMPORT_SECONDS


def test_every_library_gets_its_part_after_import_mmvit5():
    """Whichever library a process imports after mmvit5, its part is registered and no import
    fails half-way: the work that waits for a module runs while the module that imported it may
    still be executing, and must not need that one. (A library imported before mmvit5 gets its
    part at once, on ``import mmvit5``: no import is under way then.)"""
    libraries = ('mmengine.optim', 'mmcv.cnn', 'mmpretrain.models', 'timm', 'torch')
    code = ('import importlib, sys, warnings\n'
            'warnings.filterwarnings("error", ".*failed after importing")\n'
            'import mmvit5\n'
            'importlib.import_module(sys.argv[1])\n'
            'import mmengine.model\n'
            'from mmengine.registry import MODELS, WEIGHT_INITIALIZERS\n'
            'assert MODELS.get("ViT5") is not None and '
            'WEIGHT_INITIALIZERS.get("ReleasedPretrained") is not None\n'
            'if sys.argv[1] == "mmcv.cnn":\n'
            '    assert MODELS.get("SimpleFeaturePyramid") is not None\n'
            'if sys.argv[1] == "timm":\n'
            '    import timm\n'
            '    assert timm.list_models("vit5*")\n')
    runs = {name: subprocess.Popen([sys.executable, '-c', code, name], cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in libraries}
    failed = {name: run.communicate()[1][-1500:] for name, run in runs.items()}
    assert {name: err for name, err in failed.items() if runs[name].returncode} == {}

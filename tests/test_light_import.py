"""``import mmvit5`` is light: a timm or torch user registering the backbone pays neither the
OpenMMLab task libraries nor mmengine's runner, and what belongs to them happens when they are
imported (mmvit5/__init__.py, :mod:`mmvit5.utils.after_import`)."""
import json
import subprocess
import sys

from conftest import REPO

# what `import mmvit5` must not import (issue 45): the task libraries, the export and plotting
# stacks, mmengine's runner with mmcv's ops, which the upstream patches wait for, and
# torchvision (its ops import its models and datasets)
HEAVY = ('matplotlib', 'mmdet', 'mmseg', 'mmpretrain', 'onnx', 'timm', 'mmengine.runner',
         'mmcv.ops', 'mmcv.cnn', 'torchvision', 'transformers')
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
    """``import mmvit5`` registers the backbone only; mmengine's runner then brings the hooks
    and the optimizer constructor, mmdet's models (and mmcv.cnn) the neck and the COCO metric."""
    out = subprocess.run([sys.executable, '-c', PROBE, 'mmvit5', 'mmengine.runner',
                          'mmdet.models'], cwd=REPO, capture_output=True, text=True, check=True)
    light, runner, mmdet = (json.loads(line) for line in out.stdout.splitlines()[-3:])
    assert [m for m in HEAVY if m in light['modules']] == []
    assert light['registered'] == ['ViT5']
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

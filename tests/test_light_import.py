"""``import mmvit5`` is light: a timm or torch user registering the backbone pays neither the
OpenMMLab task libraries nor mmengine's runner, and what belongs to them happens when they are
imported (mmvit5/__init__.py, :mod:`mmvit5.utils.after_import`)."""
import json
import subprocess
import sys

from conftest import REPO

# what `import mmvit5` must not import (issue 45): the task libraries, the export and plotting
# stacks, and mmengine's runner with mmcv's ops, which the upstream patches wait for
HEAVY = ('matplotlib', 'mmdet', 'mmseg', 'mmpretrain', 'onnx', 'timm', 'mmengine.runner',
         'mmcv.ops', 'mmcv.cnn')


def imported_after(code: str) -> dict:
    """The modules loaded, and the registrations seen, in a new interpreter after ``code``."""
    probe = f'''
import json, sys
{code}
from mmengine.registry import HOOKS, METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS
print(json.dumps(dict(
    modules=sorted(sys.modules),
    registered=[name for name, registry in (('ViT5', MODELS), ('SimpleFeaturePyramid', MODELS),
                ('RNGStateHook', HOOKS), ('FasterCocoMetric', METRICS),
                ('ViT5LayerDecayOptimizerConstructor', OPTIM_WRAPPER_CONSTRUCTORS))
                if registry.get(name) is not None])))
'''
    out = subprocess.run([sys.executable, '-c', probe], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_import_mmvit5_is_light():
    found = imported_after('import mmvit5')
    assert not [m for m in HEAVY if m in found['modules']]
    assert found['registered'] == ['ViT5']


def test_what_a_library_brings_is_registered_when_it_is_imported():
    """The runner brings the hooks and the constructor, mmcv.cnn the neck, mmdet the COCO
    metric, in either order of imports: as an mmdet config's ``custom_imports`` sees them."""
    found = imported_after('import mmvit5\nimport mmengine.runner')
    assert found['registered'] == ['ViT5', 'RNGStateHook', 'ViT5LayerDecayOptimizerConstructor']
    found = imported_after('import mmdet.evaluation\nimport mmvit5')  # mmvit5 second
    assert 'FasterCocoMetric' in found['registered']
    found = imported_after('import mmvit5\nimport mmdet.models')
    assert set(found['registered']) == {'ViT5', 'SimpleFeaturePyramid', 'RNGStateHook',
                                        'FasterCocoMetric', 'ViT5LayerDecayOptimizerConstructor'}

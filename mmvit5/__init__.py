"""mmvit5: ViT-5 as an OpenMMLab backbone.

``import mmvit5`` (``custom_imports=dict(imports=['mmvit5'])``) imports neither torch nor any
library: each part is registered when the library it belongs to is imported
(:mod:`mmvit5.utils.after_import`), and at once where that library is imported already.
mmengine's models bring the backbone (MMEngine's registries, which mmdet, mmseg and mmpretrain
inherit from); mmcv.cnn the neck (built on it); mmengine's runner the optimizer constructor,
the optim wrapper, the hooks (:mod:`mmvit5.engine`) and ``.safetensors`` in ``load_from``;
mmdet the COCO metric (:mod:`mmvit5.evaluation`); timm the ViT-5 models in its registry
(:mod:`mmvit5.timm`); transformers ``vit5`` in AutoConfig/AutoBackbone (:mod:`mmvit5.hf`).
``mmvit5.ViT5`` and the other names of :mod:`mmvit5.models` are imported on first use.

The patches of :mod:`mmvit5.compat` come the same way, each only where the installed upstream
versions have its bug: mmengine's own checkpoints loadable under ``weights_only=True``,
mmengine's package look-ups without ``pkg_resources``, crash-safe checkpoint writes, mmengine's
distributed launcher on CPU-only machines (gloo), mmcv's RoIAlign on channels-last maps
(``MMVIT5_DISABLE_PATCHES=name,...`` or ``all`` turns them off); mmengine's optimizers are
imported without transformers, whose ``Adafactor`` is built on use. Where mmcv has no compiled
ops, its ``mmcv._ext`` is served from torchvision (:mod:`mmvit5.ops`); the installed ``.pth``
start-up file does the same for processes that never import mmvit5.
"""
import importlib

from .ops import install_hook

install_hook()  # before anything imports mmcv.ops

from . import compat  # noqa: E402
from .utils.after_import import call_after, call_around, import_after  # noqa: E402
from .version import __version__  # noqa: E402

compat.install_patches()  # before anything imports mmdet.models or the runner's code
call_around('mmengine.optim.optimizer.builder', compat.transformers_optimizers_deferred)
call_after('mmengine.optim.optimizer.builder', compat.register_transformers_optimizers)
import_after('mmengine.model', 'mmvit5.models')  # what the backbone is built on
import_after('mmcv.cnn', 'mmvit5.models.necks')  # what the neck is built on
import_after('mmengine.runner', 'mmvit5.engine')
call_after('mmengine.runner', 'mmvit5.checkpoint:register_safetensors_scheme')
import_after('mmdet', 'mmvit5.evaluation')
import_after('timm', 'mmvit5.timm')  # timm stays optional
import_after('transformers', 'mmvit5.hf')  # 'vit5' in AutoConfig/AutoBackbone, the same way

__all__ = ['__version__']


def __getattr__(name: str):
    # mmvit5.ViT5 and the rest of mmvit5.models: torch and mmengine.model come with them
    if not name.startswith('__'):
        models = importlib.import_module('.models', __name__)
        if hasattr(models, name):
            return getattr(models, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')

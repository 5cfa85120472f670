"""mmvit5: ViT-5 as an OpenMMLab backbone.

Importing the package (``custom_imports=dict(imports=['mmvit5'])``) registers the backbone in
MMEngine's registries, which mmdet, mmseg and mmpretrain inherit from, and stays light (no
mmdet, mmseg, mmpretrain, timm, onnx, matplotlib nor mmengine's runner): what belongs to a
library is done when that library is imported. mmcv.cnn brings the neck (built on it);
mmengine's runner brings the optimizer constructor, the optim wrapper and the hooks
(:mod:`mmvit5.engine`); mmdet brings the COCO metric (:mod:`mmvit5.evaluation`); timm brings
the ViT-5 models in its registry (:mod:`mmvit5.timm`); transformers brings ``vit5`` in
AutoConfig/AutoBackbone (:mod:`mmvit5.hf`). The patches of :mod:`mmvit5.compat` are applied
the same way, each only where the installed upstream versions have its bug: mmengine's own
checkpoints loadable under ``weights_only=True``, mmengine's package look-ups without
``pkg_resources``, crash-safe checkpoint writes, mmengine's distributed launcher on CPU-only
machines (gloo), mmcv's RoIAlign on channels-last maps (``MMVIT5_DISABLE_PATCHES=name,...`` or
``all`` turns them off). Where mmcv has no compiled ops, its ``mmcv._ext`` is served from
torchvision (:mod:`mmvit5.ops`); the installed ``.pth`` start-up file does the same for
processes that never import mmvit5.
"""
from .ops import install_hook

install_hook()  # before anything imports mmcv.ops

from . import compat  # noqa: E402

with compat.transformers_optimizers_deferred():  # mmengine.model imports mmengine.optim
    from . import checkpoint
    from .models import *  # noqa: F401,F403
from .utils.after_import import call_after, import_after  # noqa: E402
from .version import __version__  # noqa: E402

compat.install_patches()  # before anything imports mmdet.models or the runner's code
import_after('mmcv.cnn', 'mmvit5.models.necks')  # what the neck is built on
import_after('mmengine.runner', 'mmvit5.engine')
call_after('mmengine.runner', compat.register_transformers_optimizers)
call_after('mmengine.runner', checkpoint.register_safetensors_scheme)
import_after('mmdet', 'mmvit5.evaluation')
import_after('timm', 'mmvit5.timm')  # timm stays optional
import_after('transformers', 'mmvit5.hf')  # 'vit5' in AutoConfig/AutoBackbone, the same way

__all__ = ['__version__']

"""mmvit5: ViT-5 as an OpenMMLab backbone.

Importing the package (``custom_imports=dict(imports=['mmvit5'])``) registers the backbone,
neck and optimizer constructor in MMEngine's registries, which mmdet, mmseg and mmpretrain
inherit from. It also applies the patches of :mod:`mmvit5.compat`, each only where the
installed upstream versions have its bug: mmengine's own checkpoints loadable under
``weights_only=True``, mmengine's package look-ups without ``pkg_resources``, crash-safe
checkpoint writes, mmengine's distributed launcher on CPU-only machines (gloo), mmcv's RoIAlign
on channels-last maps (``MMVIT5_DISABLE_PATCHES=name,...`` or ``all`` turns them off).
Where mmcv has no compiled ops, its ``mmcv._ext`` is served from torchvision
(:mod:`mmvit5.ops`); the installed ``.pth`` start-up file does the same for processes that
never import mmvit5.
"""
from .ops import install_hook

install_hook()  # before anything below imports mmcv.ops

from . import compat  # noqa: E402

compat.apply_patches()  # before anything below imports mmdet.models
from .engine import *  # noqa: F401,F403,E402
from .evaluation import *  # noqa: F401,F403,E402
from .models import *  # noqa: F401,F403,E402
from .utils.after_import import import_after  # noqa: E402

import_after('timm', 'mmvit5.timm')  # the ViT-5 models in timm's registry, timm stays optional
import_after('transformers', 'mmvit5.hf')  # 'vit5' in AutoConfig/AutoBackbone, the same way
from .version import __version__  # noqa: E402

__all__ = ['__version__']

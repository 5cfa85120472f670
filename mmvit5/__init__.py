"""mmvit5: ViT-5 as an OpenMMLab backbone.

Importing the package (``custom_imports=dict(imports=['mmvit5'])``) registers the backbone,
neck and optimizer constructor in MMEngine's registries, which mmdet, mmseg and mmpretrain
inherit from. It also makes mmengine's own checkpoints loadable under ``weights_only=True``,
makes their writes crash-safe, lets mmengine's distributed launcher run on CPU-only
machines (gloo) and makes mmcv's RoIAlign read channels-last maps correctly. Where mmcv has
no compiled ops, its ``mmcv._ext`` is served from torchvision (:mod:`mmvit5.ops`); the
installed ``.pth`` start-up file does the same for processes that never import mmvit5.
"""
from .ops import install_hook

install_hook()  # before anything below imports mmcv.ops

from . import compat  # noqa: E402

compat.skip_unimportable_multimodal()  # before anything imports mmdet.models
from .engine import *  # noqa: F401,F403,E402
from .models import *  # noqa: F401,F403,E402
from .version import __version__  # noqa: E402

compat.allow_mmengine_checkpoints()
compat.allow_cpu_distributed()
compat.allow_cpu_slurm()
compat.crash_safe_checkpoints()
compat.contiguous_roi_align()

__all__ = ['__version__']

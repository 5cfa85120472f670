import importlib

from .backbones import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403


def __getattr__(name: str):
    # the neck is built on mmcv.cnn, which imports mmengine's runner (a second): imported on
    # first use here, or registered when mmcv.cnn is imported (mmvit5/__init__.py)
    if name == 'SimpleFeaturePyramid':
        return importlib.import_module('.necks', __name__).SimpleFeaturePyramid
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')

from .backbones import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .necks import *  # noqa: F401,F403

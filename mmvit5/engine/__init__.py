from .optimizers import *  # noqa: F401,F403

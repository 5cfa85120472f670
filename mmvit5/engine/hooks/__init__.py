from .distributed_hooks import (
                                StateDictConsistencyHook,
                                WorldSizeChangeHook,
                                check_same_on_all_ranks,
)
from .rng_state_hook import RNGStateHook
from .show_dir_hook import ShowDirHook

__all__ = ['RNGStateHook', 'ShowDirHook', 'StateDictConsistencyHook', 'WorldSizeChangeHook',
           'check_same_on_all_ranks']

from .distributed_hooks import (
                                StateDictConsistencyHook,
                                WorldSizeChangeHook,
                                check_same_on_all_ranks,
)
from .rng_state_hook import RNGStateHook

__all__ = ['RNGStateHook', 'StateDictConsistencyHook', 'WorldSizeChangeHook',
           'check_same_on_all_ranks']

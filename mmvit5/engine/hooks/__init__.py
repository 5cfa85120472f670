from .rng_state_hook import RNGStateHook

__all__ = ['RNGStateHook']

from .autocast_optim_wrapper import AutocastOptimWrapper
from .layer_decay_constructor import ViT5LayerDecayOptimizerConstructor

__all__ = ['AutocastOptimWrapper', 'ViT5LayerDecayOptimizerConstructor']

from .layer_decay_constructor import LayerDecayOptimizerConstructor

__all__ = ['LayerDecayOptimizerConstructor']

from .layer_decay_constructor import ViT5LayerDecayOptimizerConstructor

__all__ = ['ViT5LayerDecayOptimizerConstructor']

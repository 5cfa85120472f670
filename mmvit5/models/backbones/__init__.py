from .vit5 import ViT5

__all__ = ['ViT5']

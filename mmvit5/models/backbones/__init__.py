from .vit5 import ViT5
from .vit5_config import ViT5Config

__all__ = ['ViT5', 'ViT5Config']

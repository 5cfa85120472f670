# The released ViT-5 weights, named in one place: mmvit5/models/backbones/vit5_released.py
# (released_weights, pretrained_small, pretrained_base, pretrained_large, pretrained_base_384,
# pretrained_large_384), whose values this base config takes. __import__ rather than an import
# statement: with one, mmengine would read this file as a lazy-import config, which the
# recipes' _base_ chains cannot inherit. To use a local copy instead, set the checkpoint to its
# path (docs/en/user_guides/checkpoints.md); tools/train.py checks (and downloads) the files
# before anything is built.
_released = __import__('mmvit5.models.backbones.vit5_released', fromlist=['released_weights'])
globals().update({k: v for k, v in vars(_released).items() if not k.startswith('_')})

# The released ViT-5 weights, named in one place: mmvit5/models/backbones/vit5_released.py
# (pretrained_small, pretrained_base, pretrained_large, pretrained_base_384,
# pretrained_large_384), read here as a base config. To use a local copy instead, set the
# checkpoint to its path (docs/en/user_guides/checkpoints.md). tools/train.py checks (and
# downloads) them before anything is built.
_base_ = ['../../mmvit5/models/backbones/vit5_released.py']

"""The released ViT-5 weights (the ViT-5 README's links): the one place that names them.

:mod:`.vit5_weights` reads them (``RELEASED_URL``, ``RELEASED_FILES``), and so does
``configs/_base_/vit5_pretrained.py``, whose values the recipes take
(``{{_base_.pretrained_base}}`` and the like). The first run downloads each file once into the
torch hub cache (``torch.hub.get_dir()/checkpoints/``, under ``TORCH_HOME``), where mmengine's
loader looks too; later runs and offline machines read it from there.
"""
released_weights = 'https://huggingface.co/FengWang3211/ViT-5/resolve/main/'
pretrained_small = released_weights + 'vit5_small_patch16_224.pth'
pretrained_base = released_weights + 'vit5_base_patch16_224.pth'
pretrained_large = released_weights + 'vit5_large_patch16_224.pth'
# the 384x384 fine-tuned files (base and large only); configs using them set img_size=384
pretrained_base_384 = released_weights + 'vit5_base_patch16_384.pth'
pretrained_large_384 = released_weights + 'vit5_large_patch16_384.pth'

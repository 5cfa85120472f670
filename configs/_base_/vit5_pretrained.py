# Where the released ViT-5 weights are expected: the one place to change.
# Download from the Hugging Face hub (FengWang3211/ViT-5) into checkpoints/ (README,
# "Released checkpoints"). Configs pass it to init_cfg=dict(type='Pretrained', ...); a missing
# file fails at model initialisation with the path it looked for.
pretrained_small = 'checkpoints/vit5_small_patch16_224.pth'
pretrained_base = 'checkpoints/vit5_base_patch16_224.pth'
pretrained_large = 'checkpoints/vit5_large_patch16_224.pth'
# the 384x384 fine-tuned files (base and large only); configs using them set img_size=384
pretrained_base_384 = 'checkpoints/vit5_base_patch16_384.pth'
pretrained_large_384 = 'checkpoints/vit5_large_patch16_384.pth'

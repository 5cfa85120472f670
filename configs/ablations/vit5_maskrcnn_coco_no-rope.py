# Ablation of ../vit5_maskrcnn_coco.py.
# No 2D RoPE: the absolute embedding is the only position signal.
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(use_rope=False))

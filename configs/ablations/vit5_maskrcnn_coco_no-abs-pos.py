# Ablation of ../vit5_maskrcnn_coco.py.
# No absolute position embedding: 2D RoPE is the only position signal. A released checkpoint loads
# without its pos_embed (logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(use_abs_pos=False))

# Ablation of ../vit5_maskrcnn_coco.py.
# 16 registers (4x4 register RoPE grid). With a released checkpoint the registers start from
# scratch (logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(num_registers=16))

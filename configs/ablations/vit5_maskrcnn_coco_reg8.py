# Ablation of ../vit5_maskrcnn_coco.py.
# 8 registers (non-square: register RoPE on a 3x3 grid, last cell empty). With a released
# checkpoint the registers start from scratch (logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(num_registers=8))

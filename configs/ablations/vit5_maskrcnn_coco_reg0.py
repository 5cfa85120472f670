# Ablation of ../vit5_maskrcnn_coco.py.
# No register tokens. A released checkpoint loads without its reg_token (logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(num_registers=0))

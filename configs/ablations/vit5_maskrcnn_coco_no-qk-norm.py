# Ablation of ../vit5_maskrcnn_coco.py.
# No QK-Norm. A released checkpoint loads without its q_norm/k_norm weights (logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(qk_norm=False))

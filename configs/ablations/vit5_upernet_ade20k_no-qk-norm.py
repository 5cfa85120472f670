# Ablation of ../vit5_upernet_ade20k.py.
# No QK-Norm. A released checkpoint loads without its q_norm/k_norm weights (logged).
_base_ = ['../vit5_upernet_ade20k.py']
model = dict(backbone=dict(qk_norm=False))

# Ablation of ../vit5_upernet_ade20k.py.
# LayerNorm (with bias) instead of RMSNorm in every norm of the backbone, QK-Norm included. A
# released checkpoint loads its norm weights; the biases start at 0.
_base_ = ['../vit5_upernet_ade20k.py']
model = dict(backbone=dict(norm='ln'))

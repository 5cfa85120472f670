# Ablation of ../vit5_upernet_ade20k.py.
# No 2D RoPE: the absolute embedding is the only position signal.
_base_ = ['../vit5_upernet_ade20k.py']
model = dict(backbone=dict(use_rope=False))

# Ablation of ../vit5_upernet_ade20k.py.
# A bias in the attention qkv projection. With a released checkpoint the bias starts at 0 (the
# released function).
_base_ = ['../vit5_upernet_ade20k.py']
model = dict(backbone=dict(qkv_bias=True))

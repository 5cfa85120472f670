# Ablation of ../vit5_upernet_ade20k.py.
# No register tokens. A released checkpoint loads without its reg_token (logged).
_base_ = ['../vit5_upernet_ade20k.py']
model = dict(backbone=dict(num_registers=0))

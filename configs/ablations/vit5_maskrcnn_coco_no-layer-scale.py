# Ablation of ../vit5_maskrcnn_coco.py.
# No LayerScale. A released checkpoint loads with its gammas folded into attn.proj / mlp.fc2 (the
# same function; logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(layer_scale_init_value=None))

# Ablation of ../vit5_maskrcnn_coco.py.
# LayerScale initialised at 1e-6 instead of 1e-4. Only from scratch (init_cfg=None): a
# checkpoint's gammas replace any init (logged).
_base_ = ['../vit5_maskrcnn_coco.py']
model = dict(backbone=dict(layer_scale_init_value=1e-6))

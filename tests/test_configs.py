"""The shipped COCO / ADE20K / ImageNet configs build (weights by URL: tests/test_pretrained.py)."""
import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope, init_default_scope

from conftest import config
from mmvit5.models.backbones.vit5_weights import RELEASED_URL
from mmvit5.utils import amp_for_device, check_config

CONFIGS = {
    'vit5-s_maskrcnn_coco.py': ('small', 'mmdet'), 'vit5_maskrcnn_coco.py': ('base', 'mmdet'),
    'vit5-l_maskrcnn_coco.py': ('large', 'mmdet'), 'vit5-s_upernet_ade20k.py': ('small', 'mmseg'),
    'vit5_upernet_ade20k.py': ('base', 'mmseg'), 'vit5-l_upernet_ade20k.py': ('large', 'mmseg'),
}


def build(cfg, scope):
    init_default_scope(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS'])
    with DefaultScope.overwrite_default_scope(scope):
        return registry.MODELS.build(cfg.model)


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_config_builds_with_matching_widths(name):
    arch, scope = CONFIGS[name]
    cfg = Config.fromfile(config(name))
    assert cfg.default_scope == scope and cfg.custom_imports.imports == ['mmvit5']
    assert cfg.model.backbone.img_size == 224
    assert cfg.model.backbone.init_cfg.checkpoint == RELEASED_URL.format(
        f'vit5_{arch}_patch16_224.pth')
    assert cfg.optim_wrapper.constructor == 'ViT5LayerDecayOptimizerConstructor'
    model = build(cfg, scope)
    assert model.backbone.config.arch_settings == model.backbone.arch_zoo[arch]
    if scope == 'mmseg':
        x = torch.randn(1, 3, 64, 96)
        with torch.no_grad():
            feats = model.neck(model.backbone(x))
            assert [f.shape[1] for f in feats] == cfg.model.decode_head.in_channels
    with pytest.raises(FileNotFoundError, match=r"data_root '(data/coco/|data/ade/ADEChal)"):
        check_config(cfg, name)  # this checkout has no COCO / ADE20K


def test_maskrcnn_base_forward_at_detection_shapes():
    cfg = Config.fromfile(config('vit5_maskrcnn_coco.py'))
    cfg.model.backbone.init_cfg = None
    model = build(cfg, 'mmdet').eval()
    with torch.no_grad():
        feats = model.extract_feat(torch.randn(1, 3, 256, 320))
    assert [tuple(f.shape) for f in feats] == [(1, 256, 64, 80), (1, 256, 32, 40),
                                               (1, 256, 16, 20), (1, 256, 8, 10), (1, 256, 4, 5)]


@pytest.mark.skipif(torch.cuda.is_available(), reason='the fp16 AmpOptimWrapper is kept on CUDA')
@pytest.mark.parametrize('native_bf16', [True, False], ids=['native-bf16', 'no-native-bf16'])
def test_fp16_recipe_without_cuda_picks_a_wrapper_that_runs(native_bf16):
    """The COCO recipes ask for mmengine's fp16 AmpOptimWrapper, which needs CUDA: bf16 autocast
    replaces it where the CPU has native bf16, float32 where it does not (bf16 matmuls there run
    ~100x slower than float32 ones)."""
    cfg = Config.fromfile(config('vit5_maskrcnn_coco.py'))
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper' and 'loss_scale' in cfg.optim_wrapper
    amp_for_device(cfg, native_bf16=native_bf16)
    wrapper = cfg.optim_wrapper
    assert 'loss_scale' not in wrapper
    if native_bf16:
        assert wrapper.type == 'AutocastOptimWrapper' and wrapper.dtype == 'bfloat16'
    else:
        assert wrapper.type == 'OptimWrapper' and 'dtype' not in wrapper
    init_default_scope('mmdet')
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    built = build_optim_wrapper(model, dict(wrapper, constructor='DefaultOptimWrapperConstructor',
                                            paramwise_cfg=None))
    assert type(built).__name__ == wrapper.type
    with built.optim_context(model):
        out = model(torch.randn(2, 4))
    assert out.dtype == (torch.bfloat16 if native_bf16 else torch.float32)

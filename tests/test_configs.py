"""The shipped COCO / ADE20K / ImageNet configs build (weights by URL: tests/test_pretrained.py)
and every recipe and toy checkpoints during its run, to resume exactly."""
import glob
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope, init_default_scope

from conftest import REPO, config
from mmvit5.models.backbones.vit5_weights import RELEASED_URL
from mmvit5.utils import amp_for_device, check_config, enable_resume

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


@pytest.mark.parametrize('where, entry', [
    ('backbone', 'ViT5'), ('backbone', 'mmvit5.ViT5'), ('neck', 'SimpleFeaturePyramid')])
def test_mmvit5_types_without_the_import_are_refused(where, entry):
    cfg = Config(dict(default_scope='mmdet', model=dict(
        type='MaskRCNN', backbone=dict(type='ResNet', depth=50), neck=dict(type='FPN'))))
    check_config(cfg, check_data=False)
    cfg.model[where].type = entry
    with pytest.raises(ValueError, match=r"uses mmvit5 modules .*custom_imports = dict\("):
        check_config(cfg, check_data=False)
    cfg.custom_imports = dict(imports=['mmvit5'])
    check_config(cfg, check_data=False)


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

# one recipe of each kind (the S/B/L variants inherit its hooks and intervals) and every toy
RESUMABLE = sorted(osp.relpath(p, osp.join(REPO, 'configs')) for p in
                   glob.glob(osp.join(REPO, 'configs', 'vit5_*_*.py')) +
                   glob.glob(osp.join(REPO, 'configs', 'toy', '*.py')))


@pytest.mark.parametrize('name', [n for n in RESUMABLE if n != 'vit5_base_in1k.py'])
def test_checkpoints_during_the_run_with_the_resume_hooks(name):
    """A killed run has a checkpoint to resume from, and resumes exactly (RNGStateHook) and
    on any total batch (WorldSizeChangeHook)."""
    cfg = Config.fromfile(config(name), import_custom_modules=False)
    interval, iters = cfg.default_hooks.checkpoint.interval, cfg.train_cfg.max_iters
    assert 0 < interval <= iters // 4, (interval, iters)
    hooks = {hook.type for hook in cfg.custom_hooks}
    assert hooks >= {'RNGStateHook', 'StateDictConsistencyHook', 'WorldSizeChangeHook'}, hooks


def test_resume_builds_the_run_with_the_checkpoint_seed(tmp_path):
    """mmengine seeds the sampler and the workers as it builds the dataloader, before it reads
    the checkpoint: tools/train.py --resume sets the checkpoint's seed first, by path and from
    last_checkpoint, over the config's; a path that is not there is one clear error."""
    work = tmp_path / 'work'
    work.mkdir()
    torch.save(dict(meta=dict(seed=1234, iter=2)), work / 'iter_2.pth')
    cfg = Config(dict(work_dir=str(work)))
    enable_resume(cfg, None)  # no last_checkpoint: a fresh start
    assert cfg.resume and cfg.load_from is None and 'randomness' not in cfg
    enable_resume(cfg, str(work / 'iter_2.pth'))
    assert cfg.load_from == str(work / 'iter_2.pth') and cfg.randomness.seed == 1234
    (work / 'last_checkpoint').write_text(str(work / 'iter_2.pth'))
    cfg = Config(dict(work_dir=str(work), randomness=dict(seed=0, deterministic=True)))
    enable_resume(cfg, 'auto')
    assert cfg.randomness == dict(seed=1234, deterministic=True)
    with pytest.raises(FileNotFoundError, match=r'--resume .*iter_4\.pth: no such checkpoint'):
        enable_resume(cfg, str(work / 'iter_4.pth'))

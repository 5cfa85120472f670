"""ViT-5 as a timm model (mmvit5/timm.py): the registered names and their released weights,
timm's model API, and the same ViT5 class under timm, mmpretrain's TIMMBackbone and mmdet.

The checks of timm's own tests/test_models.py that apply to a new model are adapted in
``test_timm_model_checks``: forward (and with activation checkpointing), backward,
default_cfgs_non_std (forward_features / forward_head / reset_classifier), forward_intermediates,
features_only (the getter), load_pretrained (other num_classes and in_chans) and
features_pretrained. Left out: TorchScript and FX (ViT5's forward makes an execution plan per
call and runs custom autograd functions, which neither can compile; torch.compile and ONNX
export are its graph paths, tested elsewhere), and test_model_inference (it downloads timm's
hub test tensors).
"""
import math
import os
import subprocess
import sys
import textwrap

import pytest
import timm
import torch

import reference_vit5 as ref
from conftest import REPO
from mmvit5.checkpoint import CheckpointError
from mmvit5.models import ViT5
from mmvit5.models.backbones.vit5_weights import RELEASED_URL

NAMES = ['vit5_base_patch16_224', 'vit5_base_patch16_384', 'vit5_large_patch16_224',
         'vit5_large_patch16_384', 'vit5_small_patch16_224']
DIM, DEPTH, HEADS, IMG = 64, 4, 2, 64  # 4x4 pretraining grid
TINY = dict(arch=dict(embed_dim=DIM, depth=DEPTH, num_heads=HEADS), img_size=IMG)
NAME = 'vit5_small_patch16_224'  # any registered name, narrowed by TINY for speed


@pytest.fixture(scope='module')
def released(tmp_path_factory):
    """A released-layout file with an EMA entry (which must not be what loads), and its
    weights as a flat .safetensors file."""
    from safetensors.torch import save_file
    sd = ref.released_state_dict(DIM, DEPTH, HEADS, img_size=IMG, num_classes=1000, seed=5)
    folder = tmp_path_factory.mktemp('released')
    torch.save(ref.released_checkpoint(sd), folder / f'{NAME}.pth')
    save_file(sd, str(folder / f'{NAME}.safetensors'))
    return sd, folder


def create(file=None, **kwargs):
    kwargs = dict(TINY, **kwargs)
    if file is not None:
        kwargs.update(pretrained=True, pretrained_cfg_overlay=dict(file=str(file)))
    return timm.create_model(NAME, **kwargs)


def images(*size, batch=2, seed=0):
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(seed))


def test_registered_names_and_released_files():
    assert timm.list_models('vit5*') == NAMES  # not the public code's vit5_small, ...
    assert timm.list_pretrained('vit5*') == [f'{name}.in1k' for name in NAMES]
    for name in NAMES:
        cfg = timm.get_pretrained_cfg(name).to_dict()
        file = f'{name}.pth'
        assert (cfg['hf_hub_id'], cfg['hf_hub_filename']) == ('FengWang3211/ViT-5', file)
        assert cfg['url'] == RELEASED_URL.format(file)
        assert cfg['input_size'] == (3, int(name[-3:]), int(name[-3:]))
        # the registered shapes are the released layout's, RoPE buffers aside
        with torch.device('meta'):
            model = timm.create_model(name)
            embed_dim, depth, heads = ref.SIZES[name.split('_')[1]]
            expected = ref.released_state_dict(embed_dim, depth, heads, img_size=int(name[-3:]))
        assert type(model) is ViT5 and model.out_type == 'head'
        assert {k: v.shape for k, v in model.state_dict().items()} == {
            k: v.shape for k, v in expected.items() if not k.endswith('freqs')}


def test_pretrained_logits_equal_reference(released):
    """The released classifier (the ``model`` entry, not ``model_ema``), at the pretraining
    size and at another one; ``img_size=`` resizes pos_embed and RoPE as the backbone does;
    the same weights as .safetensors give the same model."""
    sd, folder = released
    model = create(folder / f'{NAME}.pth').eval()
    resized = create(folder / f'{NAME}.pth', img_size=96).eval()
    backbone = ViT5(**dict(TINY, img_size=96), out_type='cls_token',
                    init_cfg=dict(type='Pretrained', checkpoint=str(folder / f'{NAME}.pth')))
    backbone.init_weights()
    small, large = images(IMG, IMG), images(96, 96, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(model(small), ref.logits(sd, small, HEADS, (4, 4)),
                                   rtol=1e-5, atol=1e-5)
        # a larger input: pos_embed resized at run time, RoPE positions interpolated (i / 6 * 4)
        torch.testing.assert_close(model(large), ref.logits(sd, large, HEADS, (4, 4)),
                                   rtol=1e-5, atol=1e-5)
        # built at 96, as the reference fine-tuned at a new size: pos_embed resized at load,
        # RoPE on its own 6x6 grid
        torch.testing.assert_close(resized(large), ref.logits(sd, large, HEADS, (6, 6)),
                                   rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(resized.forward_head(resized.forward_features(large), True),
                                   backbone.eval()(large)[0], rtol=0, atol=0)
    same = create(folder / f'{NAME}.safetensors')
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(),
                                                 model.state_dict().values()))


def test_pretrained_from_the_hub_cache_offline(released, tmp_path):
    """``pretrained=True`` reads the released file from the Hugging Face cache with
    HF_HUB_OFFLINE=1 and no network, in a process that imports mmvit5 without timm first:
    ``import mmvit5`` works without timm and registers the models once timm is imported.
    The process prints no mmengine line until it makes a run's logger (issue 42)."""
    sd, folder = released
    snapshot = tmp_path / 'hub' / 'models--FengWang3211--ViT-5' / 'snapshots' / ('0' * 40)
    snapshot.mkdir(parents=True)
    os.link(folder / f'{NAME}.pth', snapshot / f'{NAME}.pth')
    (tmp_path / 'hub' / 'models--FengWang3211--ViT-5' / 'refs').mkdir()
    (tmp_path / 'hub' / 'models--FengWang3211--ViT-5' / 'refs' / 'main').write_text('0' * 40)
    x = images(IMG, IMG)
    torch.save(x, tmp_path / 'x.pt')
    script = textwrap.dedent(f'''
        import sys
        import torch
        sys.modules['timm'] = None  # as if timm were not installed
        import mmvit5
        from mmvit5.models import ViT5
        assert ViT5(**{TINY!r})(torch.randn(1, 3, 32, 32))[0].shape == (1, {DIM}, 2, 2)
        assert 'mmvit5.timm' not in sys.modules
        del sys.modules['timm']  # now installed: importing it registers the models
        import timm
        assert timm.list_models('vit5*') == {NAMES!r}, timm.list_models('vit5*')
        model = timm.create_model('{NAME}', pretrained=True, **{TINY!r}).eval()
        with torch.no_grad():
            torch.save(model(torch.load(sys.argv[1])), sys.argv[2])
        print('PLAN', model.plan(torch.load(sys.argv[1])), flush=True)  # on request
        from mmengine.logging import MMLogger
        MMLogger.get_instance('a_run', log_level='INFO')  # as a Runner names its logger
        model = timm.create_model('{NAME}', pretrained=True, **{TINY!r})
        model(torch.load(sys.argv[1]))
    ''')
    closed = 'http://127.0.0.1:9'  # the discard port: any request fails at once
    env = dict(os.environ, HF_HUB_OFFLINE='1', HF_HUB_CACHE=str(tmp_path / 'hub'),
               https_proxy=closed, http_proxy=closed, HTTPS_PROXY=closed, HTTP_PROXY=closed,
               PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''),
               OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-c', script, str(tmp_path / 'x.pt'),
                           str(tmp_path / 'logits.pt')], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # no runner, no mmengine line; in a run's log, the plan and the file loaded
    plain, run = (proc.stdout + proc.stderr).split('PLAN ', 1)
    assert 'mmengine' not in plain and 'INFO' not in plain, plain
    assert run.startswith('cpu, eager, float32')
    assert 'mmengine - INFO - ViT5 execution plan: cpu, eager, float32' in run
    assert f'mmengine - INFO - ViT5: loaded {5 + 13 * DEPTH + 3} tensors from ' \
           f'{snapshot / NAME}.pth' in run
    torch.testing.assert_close(torch.load(tmp_path / 'logits.pt'),
                               ref.logits(sd, x, HEADS, (4, 4)), rtol=1e-5, atol=1e-5)


def test_timm_model_checks(released):
    """timm's tests/test_models.py, as far as it applies (see the module docstring)."""
    sd, folder = released
    # test_model_forward, with grad checkpointing giving the same output
    model = create().eval()
    x = images(IMG, 80, batch=1)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (1, 1000) and not out.isnan().any()
        model.set_grad_checkpointing()
        torch.testing.assert_close(model(x), out, rtol=1e-4, atol=1e-5)

    # test_model_backward: every parameter gets a gradient, the same with checkpointing
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = create(num_classes=42).train()
        model.set_grad_checkpointing(checkpointing)
        assert model.plan(x).checkpoint is checkpointing and model.config.with_cp is checkpointing
        out = model(images(IMG, IMG))
        out.mean().backward()
        assert out.shape == (2, 42) and not out.isnan().any()
        assert [n for n, p in model.named_parameters() if p.grad is None] == []
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[1].items():
        torch.testing.assert_close(grad, grads[0][name], rtol=1e-5, atol=1e-6)

    # test_model_default_cfgs_non_std
    model = create().eval()
    assert model.num_classes == 1000 and model.num_features == model.head_hidden_size == DIM
    state = model.state_dict()
    assert 'head.weight' in state and 'patch_embed.proj.weight' in state  # cfg's names
    x = images(IMG, IMG, batch=1)
    with torch.no_grad():
        features = model.forward_features(x)
        pre_logits = model.forward_head(features, pre_logits=True)
        assert features.shape == (1, 1 + 16 + 4, DIM) and pre_logits.shape == (1, DIM)
        torch.testing.assert_close(model.forward_head(features), model(x))
        model.reset_classifier(0)
        assert model.num_classes == 0 and model(x).shape == pre_logits.shape
        assert create(num_classes=0).eval()(x).shape == (1, DIM)

    # test_model_forward_intermediates: one map per block, and the same final tokens
    final, maps = model.forward_intermediates(x, output_fmt='NCHW')
    assert len(maps) == len(model.feature_info) == DEPTH
    for info, fmap in zip(model.feature_info, maps):
        assert fmap.shape == (1, info['num_chs'], IMG // info['reduction'], IMG // 16)
    torch.testing.assert_close(final, model.forward_features(x))

    # test_model_forward_intermediates_features / forward_features: the getter wrapper
    features_only = create(features_only=True, out_indices=(1, 3)).eval()
    info = features_only.feature_info
    assert info.channels() == [DIM, DIM] and info.reduction() == [16, 16]
    size = (96, 80)
    for channels, reduction, fmap in zip(info.channels(), info.reduction(),
                                         features_only(images(*size, batch=1))):
        assert fmap.shape[:2] == (1, channels) and not fmap.isnan().any()
        assert all(s <= math.ceil(full / reduction) + 1 for s, full in zip(fmap.shape[2:], size))

    # test_model_load_pretrained (another head, one input channel), features_pretrained
    other = create(folder / f'{NAME}.pth', num_classes=5, in_chans=1)
    assert other.head.weight.shape == (5, DIM)
    torch.testing.assert_close(other.patch_embed.proj.weight,
                               sd['patch_embed.proj.weight'].sum(dim=1, keepdim=True))
    torch.testing.assert_close(other.blocks[2].attn.qkv.weight, sd['blocks.2.attn.qkv.weight'])
    assert create(folder / f'{NAME}.pth', num_classes=0).num_classes == 0
    # a file without the classifier is no released classifier: refused, not left at random
    backbone_only = {k: v for k, v in sd.items() if not k.startswith('head.')}
    with pytest.raises(CheckpointError, match=r"(?s)missing keys: \['head.weight'.*num_classes"):
        create(pretrained=True, pretrained_cfg_overlay=dict(state_dict=backbone_only))
    features_only = create(folder / f'{NAME}.pth', features_only=True, out_indices=(1, ))
    torch.testing.assert_close(features_only.model.blocks[1].mlp.fc2.bias,
                               sd['blocks.1.mlp.fc2.bias'])


def test_features_only_maps_strip_registers_and_prune():
    """The getter's maps are the backbone's outputs (registers stripped); the blocks after the
    last one taken, the final norm and the head are pruned away."""
    torch.manual_seed(0)
    features_only = create(features_only=True, out_indices=(0, 2)).eval()
    model = features_only.model
    assert len(model.blocks) == 3 and isinstance(model.norm, torch.nn.Identity)
    assert isinstance(model.head, torch.nn.Identity) and model.global_pool == ''
    backbone = ViT5(**TINY, out_indices=(0, 2))
    backbone.load_state_dict(model.state_dict(), strict=False)  # the pruned block 3 aside
    x = images(48, 80)
    with torch.no_grad():
        for got, want in zip(features_only(x), backbone.eval()(x)):
            assert got.shape == (2, DIM, 3, 5)
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_pools_and_reset_classifier():
    model = create(num_classes=3).eval()
    x = images(IMG, 80, batch=1)
    with torch.no_grad():
        tokens = model.forward_features(x)
        parts = model.forward_tokens(x)
        torch.testing.assert_close(model.forward_head(tokens, pre_logits=True),
                                   parts['cls_token'])  # class token, as released
        model.reset_classifier(3, 'avg')  # the patches' mean: neither class token nor registers
        torch.testing.assert_close(model.forward_head(tokens, pre_logits=True),
                                   parts['patch_tokens'].mean(dim=1))
        model.reset_classifier(0, '')
        assert torch.equal(model(x), tokens)
    with pytest.raises(ValueError, match="global_pool must be one of .* got 'max'"):
        model.reset_classifier(3, 'max')
    with pytest.raises(ValueError, match='num_classes must be an integer >= 0, got -1'):
        ViT5(**TINY, num_classes=-1)
    # ViT5 without num_classes, as every mmdet/mmseg config builds it: no head, maps out
    backbone = ViT5(**TINY)
    assert not [k for k in backbone.state_dict() if k.startswith('head')]
    assert isinstance(backbone(x), tuple)


def test_layer_decay_groups_follow_timms_vit():
    """timm's layer decay groups ViT5's parameters as it groups those of its own ViT (with
    registers); mmvit5's get_layer_depth agrees but for the final norm (mmpretrain's rule puts
    it with the head, timm's with the last block)."""
    from timm.models import group_parameters
    from timm.models.vision_transformer import VisionTransformer
    model = create()
    vit = VisionTransformer(img_size=IMG, embed_dim=DIM, depth=DEPTH, num_heads=HEADS,
                            reg_tokens=4, no_embed_class=True)
    ours = group_parameters(model, model.group_matcher(), reverse=True)
    theirs = group_parameters(vit, vit.group_matcher(), reverse=True)
    shared = sorted(set(ours) & set(theirs))
    assert len(shared) >= 8 * DEPTH + 6  # stem, block and head parameters
    assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}
    depths = {name: model.get_layer_depth(name)[0] for name in ours}
    assert {k: v for k, v in ours.items() if k != 'norm.weight'} == {
        k: v for k, v in depths.items() if k != 'norm.weight'}
    assert ours['norm.weight'] == depths['norm.weight'] - 1 == DEPTH
    assert model.no_weight_decay() <= set(ours)


def test_timm_backbone_of_mmpretrain_builds_the_same_vit5(released):
    """mmpretrain's TIMMBackbone builds ViT5 itself: its maps are those of the mmdet/mmseg
    backbone loaded from the same released file."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    _, folder = released
    path = str(folder / f'{NAME}.pth')
    # built in an mmpretrain config's scope, whatever default an earlier test left behind
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        timm_backbone = MODELS.build(dict(
            type='TIMMBackbone', model_name=NAME, features_only=True, out_indices=(0, 2),
            pretrained=True, pretrained_cfg_overlay=dict(file=path), **TINY))
    assert type(timm_backbone.timm_model.model) is ViT5
    backbone = ViT5(**TINY, out_indices=(0, 2), init_cfg=dict(type='Pretrained', checkpoint=path))
    backbone.init_weights()
    x = images(IMG, 96)
    with torch.no_grad():
        timm_backbone.eval()  # mmpretrain's train() returns None
        got, want = timm_backbone(x), backbone.eval()(x)
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # without features_only TIMMBackbone resets the classifier and the pooling: all tokens
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        tokens = MODELS.build(dict(type='TIMMBackbone', model_name=NAME, **TINY))
    tokens.eval()
    assert type(tokens.timm_model) is ViT5
    with torch.no_grad():
        assert [t.shape for t in tokens(x)] == [(2, 1 + 24 + 4, DIM)]


@pytest.mark.parametrize('offline', [True, False])
def test_pretrained_without_the_hub_says_what_to_do(offline, tmp_path, monkeypatch):
    """No cached file and no hub (HF_HUB_OFFLINE, or an endpoint that refuses): one line at
    once naming the file, the cache looked in, and the local-file route; nothing is sent
    anywhere (the endpoint is the discard port of this machine)."""
    import time

    from huggingface_hub import constants
    for proxy in ('https_proxy', 'http_proxy', 'HTTPS_PROXY', 'HTTP_PROXY', 'all_proxy',
                  'ALL_PROXY'):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', offline)
    monkeypatch.setattr(constants, 'ENDPOINT', 'http://127.0.0.1:9')
    begin = time.perf_counter()
    with pytest.raises(FileNotFoundError) as error:
        create(pretrained=True)
    assert time.perf_counter() - begin < 15  # the bound, where the hub retried ~40 s
    line = str(error.value)
    assert '\n' not in line
    assert f'FengWang3211/ViT-5/{NAME}.pth' in line and str(tmp_path / 'hub') in line
    assert 'pretrained_cfg_overlay=dict(file=PATH)' in line
    assert ('HF_HUB_OFFLINE is set' if offline else 'http://127.0.0.1:9 cannot be reached') \
        in line


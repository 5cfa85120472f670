"""ViT-5 in Hugging Face transformers (mmvit5/hf.py): AutoConfig / AutoBackbone registration,
transformers' own UperNet, Mask2Former and DPT heads on it (loss, backward, save/load), the
released weights through ``tools/convert_checkpoint.py --layout hf``, and a short fine-tune
with transformers' Trainer (docs/en/user_guides/hf.md). Offline: HF_HUB_OFFLINE=1 and every
proxy a closed port, so any network call fails."""
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

transformers = pytest.importorskip('transformers')

from transformers import (  # noqa: E402
    AutoBackbone,
    AutoConfig,
    DPTConfig,
    DPTForDepthEstimation,
    Mask2FormerConfig,
    Mask2FormerForUniversalSegmentation,
    UperNetConfig,
    UperNetForSemanticSegmentation,
)

import reference_vit5 as ref  # noqa: E402
from conftest import REPO  # noqa: E402
from mmvit5.hf import Vit5Backbone, Vit5BackboneConfig  # noqa: E402
from mmvit5.models import ViT5  # noqa: E402

DIM, DEPTH, HEADS, IMG = 64, 4, 2, 64  # a 4x4 pretraining grid, for speed
TINY = dict(hidden_size=DIM, num_hidden_layers=DEPTH, num_attention_heads=HEADS, image_size=IMG)
H, W = 64, 96  # non-square inputs everywhere


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """HF_HUB_OFFLINE=1 (the variable and huggingface_hub's constant, read at its import) and
    a closed port as every proxy."""
    import huggingface_hub.constants
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        proxy = f'http://127.0.0.1:{sock.getsockname()[1]}'
    for name in ('https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY'):
        monkeypatch.setenv(name, proxy)
    for name in ('no_proxy', 'NO_PROXY'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    monkeypatch.setattr(huggingface_hub.constants, 'HF_HUB_OFFLINE', True)


@pytest.fixture(scope='module')
def released(tmp_path_factory):
    """A released-layout file (random weights, with the EMA entry that must not load) named
    as the ViT-5-S release, and its transformers folder from the conversion tool."""
    from convert_checkpoint import convert
    sd = ref.released_state_dict(DIM, DEPTH, HEADS, img_size=IMG, num_classes=1000, seed=3)
    folder = tmp_path_factory.mktemp('released')
    torch.save(ref.released_checkpoint(sd), folder / 'vit5_small_patch16_224.pth')
    convert(str(folder / 'vit5_small_patch16_224.pth'), str(folder / 'hf'), layout='hf')
    return sd, folder


def images(*size, batch=2, seed=0):
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(seed))


def test_config_registered_and_checked():
    config = AutoConfig.for_model('vit5', **TINY, feature_pyramid=True)
    assert type(config) is Vit5BackboneConfig
    assert config.stage_names == ['stem', 'stage1', 'stage2', 'stage3', 'stage4']
    assert config.out_features == ['stage1', 'stage2', 'stage3', 'stage4']  # one per level
    assert type(AutoBackbone.from_config(config)) is Vit5Backbone
    with pytest.raises(ValueError, match="include 'stem'"):
        Vit5BackboneConfig(**TINY, out_indices=[0, 4])
    with pytest.raises(ValueError, match='one or four out_indices'):
        Vit5BackboneConfig(**TINY, out_indices=[2, 4], feature_pyramid=True)
    with pytest.raises(ValueError, match='num_heads'):  # ViT5Config's own check, named
        Vit5BackboneConfig(**dict(TINY, num_attention_heads=3))


@pytest.mark.slow  # a process of its own
def test_import_mmvit5_without_transformers_then_registered():
    """``import mmvit5`` works where transformers is absent and imports no mmvit5.hf; importing
    transformers afterwards registers 'vit5' (as timm's registration, mmvit5/timm.py)."""
    script = textwrap.dedent('''
        import sys
        sys.modules['transformers'] = None  # as if transformers were not installed
        import mmvit5
        assert 'mmvit5.hf' not in sys.modules
        del sys.modules['transformers']
        from transformers import AutoConfig
        assert type(AutoConfig.for_model('vit5')).__module__ == 'mmvit5.hf'
    ''')
    subprocess.run([sys.executable, '-c', script], cwd=REPO, check=True, timeout=300,
                   env=dict(os.environ, PYTHONPATH=REPO))


def test_maps_are_vit5_outputs():
    """Stride-16 maps: the blocks of ``out_features`` (the last after the final norm), as
    ViT5's forward gives them; DPT's tokens are the class token and the same patches."""
    torch.manual_seed(0)
    backbone = Vit5Backbone(Vit5BackboneConfig(**TINY, out_indices=[2, 4])).eval()
    tokens = Vit5Backbone(Vit5BackboneConfig(**TINY, out_indices=[2, 4],
                                             reshape_hidden_states=False)).eval()
    tokens.load_state_dict(backbone.state_dict())
    vit5 = ViT5(arch=dict(embed_dim=DIM, depth=DEPTH, num_heads=HEADS), img_size=IMG,
                out_indices=(1, 3)).eval()
    vit5.load_state_dict(backbone.vit5.state_dict())
    x = images(H, W)
    with torch.no_grad():
        maps, seqs, expected = backbone(x).feature_maps, tokens(x).feature_maps, vit5(x)
    assert [m.shape for m in maps] == [(2, DIM, H // 16, W // 16)] * 2
    for got, seq, want in zip(maps, seqs, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert seq.shape == (2, 1 + H // 16 * W // 16, DIM)
        torch.testing.assert_close(seq[:, 1:], want.flatten(2).transpose(1, 2), rtol=0, atol=0)
    assert backbone.channels == [DIM, DIM]


def loss_and_grads(model, x, **labels):
    model.train()
    out = model(pixel_values=x, **labels)
    loss = out.loss if out.get('loss') is not None else \
        (out.predicted_depth - labels.get('depth', torch.ones(1))).abs().mean()
    loss.backward()
    assert torch.isfinite(loss)
    backbone = model.backbone if hasattr(model, 'backbone') \
        else model.model.pixel_level_module.encoder
    grads = [p.grad for p in backbone.vit5.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    return out


def round_trip(model, folder, x, read):
    """save_pretrained / from_pretrained give the same outputs, in eval mode."""
    model.eval()
    model.save_pretrained(folder)
    again = type(model).from_pretrained(folder).eval()
    assert type(again.config.backbone_config) is Vit5BackboneConfig
    with torch.no_grad():
        torch.testing.assert_close(read(again(pixel_values=x)), read(model(pixel_values=x)),
                                   rtol=0, atol=0)


def test_upernet(tmp_path):
    torch.manual_seed(0)
    config = UperNetConfig(backbone_config=Vit5BackboneConfig(**TINY, feature_pyramid=True),
                           num_labels=3, hidden_size=32, auxiliary_channels=16,
                           auxiliary_in_channels=DIM)
    model = UperNetForSemanticSegmentation(config)
    assert [m.shape[-2:] for m in model.backbone(images(H, W)).feature_maps] == [
        (H // s, W // s) for s in (4, 8, 16, 32)]
    x = images(H, W)
    out = loss_and_grads(model, x, labels=torch.randint(0, 3, (2, H, W)))
    assert out.logits.shape == (2, 3, H, W)
    round_trip(model, tmp_path, x, lambda o: o.logits)


def test_mask2former(tmp_path):
    torch.manual_seed(0)
    config = Mask2FormerConfig(
        backbone_config=Vit5BackboneConfig(**TINY, feature_pyramid=True, pyramid_channels=32),
        num_labels=3, feature_size=32, mask_feature_size=32, hidden_dim=32,
        encoder_feedforward_dim=64, encoder_layers=1, decoder_layers=2, num_attention_heads=2,
        dim_feedforward=64, num_queries=8, train_num_points=256)
    model = Mask2FormerForUniversalSegmentation(config)
    x = images(H, W)
    masks = [(torch.rand(2, H, W) > 0.5).float() for _ in range(2)]
    loss_and_grads(model, x, mask_labels=masks,
                   class_labels=[torch.tensor([0, 2]), torch.tensor([1, 2])])
    round_trip(model, tmp_path, x, lambda o: o.masks_queries_logits)


def test_dpt(tmp_path):
    """DPT's depth head on the stride-16 tokens; transformers' DPT computes no depth loss
    (labels raise NotImplementedError), so the loss is an L1 on ``predicted_depth``."""
    torch.manual_seed(0)
    config = DPTConfig(backbone_config=Vit5BackboneConfig(**TINY, reshape_hidden_states=False),
                       is_hybrid=False, neck_hidden_sizes=[16, 32, 64, 64],
                       fusion_hidden_size=32, head_hidden_size=16)
    model = DPTForDepthEstimation(config)
    model.activation_checkpointing_enable()  # reaches ViT5's own switch
    assert model.backbone.vit5.grad_checkpointing
    x = images(H, W)
    out = loss_and_grads(model, x, depth=torch.rand(2, H, W))
    model.activation_checkpointing_disable()
    assert not model.backbone.vit5.grad_checkpointing
    assert out.predicted_depth.shape == (2, H, W)
    round_trip(model, tmp_path, x, lambda o: o.predicted_depth)


def test_released_weights(released, monkeypatch):
    """The converted folder loads with AutoBackbone offline, by an absolute or a relative path
    (transformers alone asks the hub about either); its last map is the public code's last
    block after the final norm, and mmvit5's ViT5 on the released file."""
    from convert_checkpoint import convert
    sd, folder = released
    assert sorted(os.listdir(folder / 'hf')) == ['config.json', 'model.safetensors']
    with pytest.raises(ValueError, match='--keep-head does not apply to --layout hf'):
        convert(str(folder / 'vit5_small_patch16_224.pth'), str(folder / 'hf2'), keep_head=True,
                layout='hf')
    assert not (folder / 'hf2').exists()
    assert type(AutoConfig.from_pretrained(str(folder / 'hf'))) is Vit5BackboneConfig
    monkeypatch.chdir(folder)
    relative = AutoBackbone.from_pretrained('hf')
    backbone = AutoBackbone.from_pretrained(str(folder / 'hf')).eval()
    assert type(backbone) is Vit5Backbone
    assert all(torch.equal(a, b) for a, b in zip(relative.state_dict().values(),
                                                 backbone.state_dict().values()))
    assert (backbone.config.hidden_size, backbone.config.num_attention_heads) == (DIM, HEADS)
    vit5 = ViT5(arch=dict(embed_dim=DIM, depth=DEPTH, num_heads=HEADS), img_size=IMG,
                init_cfg=dict(type='Pretrained',
                              checkpoint=str(folder / 'vit5_small_patch16_224.pth'))).eval()
    vit5.init_weights()
    for size in ((IMG, IMG), (H, W)):
        x = images(*size)
        with torch.no_grad():
            last = backbone(x).feature_maps[-1]
            tokens = ref.forward(sd, x, HEADS, (IMG // 16, IMG // 16))
        patches = tokens[:, 1:1 + last.shape[-2] * last.shape[-1]]
        want = patches.transpose(1, 2).reshape(last.shape)
        assert ((last - want).norm() / want.norm()).item() < 1e-5
        torch.testing.assert_close(last, vit5(x)[-1], rtol=0, atol=0)


def test_pretrained_backbone_in_a_head(released):
    """The weights of such a folder in UperNet: transformers 5.1+ ignores
    use_pretrained_backbone (a head's backbone is built from its config, never loaded), so the
    loaded backbone goes in."""
    sd, folder = released
    backbone = AutoBackbone.from_pretrained(str(folder / 'hf'), feature_pyramid=True)
    model = UperNetForSemanticSegmentation(UperNetConfig(
        backbone_config=backbone.config, num_labels=3, hidden_size=32, auxiliary_channels=16,
        auxiliary_in_channels=DIM, use_pretrained_backbone=True))
    model.backbone = backbone
    state = model.state_dict()
    assert torch.equal(state['backbone.vit5.blocks.1.attn.qkv.weight'],
                       sd['blocks.1.attn.qkv.weight'])
    assert torch.equal(state['backbone.vit5.pos_embed'], sd['pos_embed'])


@pytest.mark.slow  # trains (60 steps, ~30 s on 2 cores)
def test_guide_finetune_raises_held_out_miou(toy_root, tmp_path, monkeypatch):
    """docs/en/user_guides/hf.md's fine-tune, shortened (fewer steps, a narrower model, the
    session's toy set at 64 px): transformers' Trainer trains UperNet on ViT-5, and the mIoU
    on the held-out images rises."""
    import re

    from conftest import guide_snippets
    code = guide_snippets('user_guides/hf.md')['finetune']
    settings = {'DATA': repr(str(toy_root / 'data' / 'toy' / 'ade' / 'ADEChallengeData2016')),
                'SIZE, STEPS, WIDTH, DEPTH': '128, 60, 64, 2'}
    for name, value in settings.items():
        code, count = re.subn(rf'^{re.escape(name)} = .*$', f'{name} = {value}', code,
                              flags=re.MULTILINE)
        assert count == 1, name
    monkeypatch.chdir(tmp_path)
    scope = {'__name__': '__docs__'}
    exec(compile(code, 'hf.md#finetune', 'exec'), scope)
    assert scope['after'] > scope['before'] + 0.1, (scope['before'], scope['after'])

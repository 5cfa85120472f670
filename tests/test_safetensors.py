"""safetensors wherever a checkpoint is read or written: tools/convert_checkpoint.py writes it
in both layouts; ViT5's init_cfg, ReleasedPretrained, mmengine's load_from and timm read it; a
truncated file is refused before anything loads."""
import json
import sys

import pytest
import timm
import torch
import torch.nn as nn
from convert_checkpoint import convert, main
from mmengine.config import Config
from mmengine.runner import load_checkpoint
from safetensors import safe_open
from safetensors.torch import load_file

import reference_vit5 as ref
from mmvit5.checkpoint import CheckpointError, ReleasedPretrainedInit, read_checkpoint
from mmvit5.models import ViT5
from mmvit5.utils import check_pretrained

DIM, DEPTH, HEADS, IMG, CLASSES = 64, 2, 2, 64, 10
ARCH = dict(embed_dim=DIM, depth=DEPTH, num_heads=HEADS)


@pytest.fixture(scope='module')
def released(tmp_path_factory):
    sd = ref.released_state_dict(DIM, DEPTH, HEADS, img_size=IMG, num_classes=CLASSES, seed=7)
    path = tmp_path_factory.mktemp('released') / 'vit5_small_patch16_224.pth'
    torch.save(ref.released_checkpoint(sd), path)
    return sd, path


class Classifier(nn.Module):
    """The keys of an mmpretrain classifier: ``backbone.*`` and ``head.fc.*``."""

    def __init__(self):
        super().__init__()
        self.backbone = ViT5(arch=ARCH, img_size=IMG)
        self.head = nn.Module()
        self.head.fc = nn.Linear(DIM, CLASSES)


def test_mmengine_layout_safetensors_loads_everywhere(released, tmp_path):
    sd, src = released
    convert(str(src), str(tmp_path / 'c.pth'), keep_head=True)
    meta = convert(str(src), str(tmp_path / 'c.safetensors'), keep_head=True)
    path = str(tmp_path / 'c.safetensors')
    expected = torch.load(tmp_path / 'c.pth', weights_only=True)['state_dict']
    written = load_file(path)
    assert written.keys() == expected.keys()
    assert all(torch.equal(written[k], v) for k, v in expected.items())
    with safe_open(path, 'pt') as f:
        assert json.loads(f.metadata()['mmvit5']) == meta and meta['layout'] == 'mmengine'

    backbone = ViT5(arch=ARCH, img_size=IMG, init_cfg=dict(type='Pretrained', checkpoint=path))
    backbone.init_weights()
    assert torch.equal(backbone.blocks[1].attn.qkv.weight, sd['blocks.1.attn.qkv.weight'])
    head = nn.Linear(DIM, CLASSES)
    ReleasedPretrainedInit(path, prefix='head.fc.')(head)
    assert torch.equal(head.weight, sd['head.weight'])
    model = Classifier()  # mmengine's load_from, runner.load_checkpoint, tools/test.py
    load_checkpoint(model, path, strict=True)
    assert torch.equal(model.backbone.pos_embed, sd['pos_embed'])
    assert torch.equal(model.head.fc.bias, sd['head.bias'])


def test_timm_layout_from_the_command_line(released, tmp_path, monkeypatch, capsys):
    """``--layout timm`` writes the model's own keys: timm's strict ``checkpoint_path=`` and
    ``pretrained_cfg_overlay=dict(file=...)`` both give the released logits."""
    sd, src = released
    dst = tmp_path / 'vit5.safetensors'
    monkeypatch.setattr(sys, 'argv', ['convert_checkpoint.py', str(src), str(dst),
                                      '--layout', 'timm', '--keep-head'])
    main()  # the command line in this process: a subprocess would import everything again
    # the RoPE buffers are dropped
    assert f'wrote {len(sd) - 2 * DEPTH} tensors to {dst}' in capsys.readouterr().err
    kwargs = dict(arch=ARCH, img_size=IMG, num_classes=CLASSES)
    x = torch.randn(2, 3, IMG, IMG, generator=torch.Generator().manual_seed(0))
    expected = ref.logits(sd, x, HEADS, (4, 4))
    for model in (timm.create_model('vit5_small_patch16_224', checkpoint_path=str(dst), **kwargs),
                  timm.create_model('vit5_small_patch16_224', pretrained=True,
                                    pretrained_cfg_overlay=dict(file=str(dst)), **kwargs)):
        with torch.no_grad():
            torch.testing.assert_close(model.eval()(x), expected, rtol=1e-5, atol=1e-5)


def test_truncated_safetensors_is_refused_before_loading(released, tmp_path):
    _, src = released
    path = tmp_path / 'c.safetensors'
    convert(str(src), str(path))
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])  # an interrupted download
    with pytest.raises(CheckpointError, match='c.safetensors.* is truncated or not a safetensors'):
        read_checkpoint(str(path))
    cfg = Config(dict(model=dict(type='ViT5'), load_from=str(path)))
    with pytest.raises(CheckpointError, match='my.py: load_from: .*truncated'):
        check_pretrained(cfg, 'my.py')

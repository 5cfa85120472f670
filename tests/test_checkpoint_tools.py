"""tools/convert_checkpoint.py and the mmpretrain classifier config on released-layout files."""
import pytest
import torch
from mmengine.config import Config

import reference_vit5 as ref
from conftest import REPO, config, run_tool, tool

pytestmark = pytest.mark.slow  # a ViT5-B file and the conversion tool


@pytest.fixture(scope='module')
def released_base(tmp_path_factory):
    """A released-layout ViT5-B file (random weights, gammas/norms far from init)."""
    sd = ref.released_state_dict(768, 12, 12, img_size=224, num_classes=1000, seed=3)
    path = tmp_path_factory.mktemp('released') / 'vit5_base_patch16_224.pth'
    torch.save(ref.released_checkpoint(sd, with_ema=False), path)
    return sd, path


def test_convert_resizes_pos_embed_and_loads(released_base, tmp_path):
    sd, path = released_base
    dst = tmp_path / 'converted.pth'
    out = run_tool(tool('convert_checkpoint.py') + [str(path), str(dst), '--img-size', '384',
                                                    '--keep-head'], cwd=REPO)
    assert 'resized pos_embed from 14x14 to 24x24' in out
    ckpt = torch.load(dst, weights_only=True)
    assert set(ckpt) == {'state_dict', 'meta'} and ckpt['meta']['img_size'] == 384
    assert ckpt['state_dict']['backbone.pos_embed'].shape == (1, 576, 768)
    assert torch.equal(ckpt['state_dict']['head.fc.weight'], sd['head.weight'])
    assert not [k for k in ckpt['state_dict'] if 'freqs' in k]
    from mmvit5.models import ViT5
    model = ViT5(arch='base', img_size=384, init_cfg=dict(type='Pretrained', checkpoint=str(dst)))
    model.init_weights()
    assert torch.equal(model.blocks[3].attn.qkv.weight, sd['blocks.3.attn.qkv.weight'])
    assert not list(tmp_path.glob('*.part'))


def test_convert_refuses_to_overwrite_source(released_base):
    _, path = released_base
    code, out = run_tool(tool('convert_checkpoint.py') + [str(path), str(path)], cwd=REPO,
                         check=False)
    assert code != 0 and 'never overwritten' in out


def test_in1k_config_logits_equal_reference(released_base):
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules
    register_all_modules()
    sd, path = released_base
    cfg = Config.fromfile(config('vit5_base_in1k.py'))
    cfg.model.backbone.init_cfg.checkpoint = str(path)
    cfg.model.head.init_cfg.checkpoint = str(path)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.eval()
    images = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(images, mode='tensor')
        expected = ref.logits(sd, images, 12, (14, 14))
    assert ((ours - expected).norm() / expected.norm()).item() < 1e-5

"""Released weights by URL (configs/_base_/vit5_pretrained.py): read from the torch hub cache
with no network, offline a one-line error naming the URL and where to put the file, a local file
given explicitly wins, and tools/train.py refuses a missing checkpoint before anything is built.

"No network" is real, not mocked: every http(s) request goes through a proxy on a closed local
port (urllib, which torch.hub downloads with, reads ``https_proxy``), so any download attempt
is refused at once.
"""
import glob
import os
import os.path as osp
import re
import socket

import pytest
import torch
from mmengine.config import Config
from mmengine.runner import CheckpointLoader

import reference_vit5 as ref
from conftest import REPO, config, run_tool, tool
from mmvit5.checkpoint import DOCS, CheckpointError, hub_cache_path
from mmvit5.models import ViT5
from mmvit5.models.backbones.vit5_weights import RELEASED_FILES, RELEASED_URL
from mmvit5.utils import check_pretrained, pretrained_checkpoints

RECIPE = 'vit5-s_upernet_ade20k.py'  # ViT5-S: the smallest released file
SMALL = 'vit5_small_patch16_224.pth'
KEY = 'model.backbone.init_cfg.checkpoint'


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """An empty torch hub cache under ``tmp_path`` and no network; returns the cache folder."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch'))
    proxy = f'http://127.0.0.1:{closed_port()}'
    for name in ('https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY'):
        monkeypatch.setenv(name, proxy)
    for name in ('no_proxy', 'NO_PROXY'):
        monkeypatch.delenv(name, raising=False)
    cache = tmp_path / 'torch' / 'hub' / 'checkpoints'
    assert torch.hub.get_dir() == str(cache.parent), 'torch.hub.set_dir() was called earlier'
    return cache


def small_file(path, seed):
    """A released-layout file (random weights) at ``path``; returns its state dict. Two blocks
    of width 64, for speed: :func:`backbone` narrows the recipe's ViT5-S to match."""
    sd = ref.released_state_dict(64, 2, 2, img_size=224, seed=seed)
    os.makedirs(osp.dirname(path), exist_ok=True)
    torch.save(ref.released_checkpoint(sd, with_ema=False), path)
    return sd


def backbone(cfg) -> ViT5:
    """The recipe's backbone, its init_cfg (the URL) kept, at the width of :func:`small_file`."""
    kwargs = {k: v for k, v in cfg.model.backbone.items() if k != 'type'}
    return ViT5(**dict(kwargs, arch=dict(embed_dim=64, depth=2, num_heads=2), out_indices=(1, )))


def test_every_recipe_names_a_released_url():
    """The base file names each released file by its URL; no other config names a file."""
    base = osp.join(REPO, 'configs', '_base_', 'vit5_pretrained.py')
    urls = [v for k, v in Config.fromfile(base).items() if k.startswith('pretrained_')]
    assert sorted(urls) == sorted(RELEASED_URL.format(name) for name in RELEASED_FILES)
    for path in glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True):
        with open(path) as f:
            assert path == base or not re.search(r'\.pth|checkpoints/', f.read()), path
    cfg = Config.fromfile(config('vit5-l384_upernet_ade20k.py'))  # and a 384 recipe gets its own
    assert pretrained_checkpoints(cfg) == [(KEY, RELEASED_URL.format('vit5_large_patch16_384.pth'))]
    assert cfg.model.backbone.img_size == 384


def test_url_loads_from_the_hub_cache_with_no_network(offline, tmp_path):
    cfg = Config.fromfile(config(RECIPE))
    url = cfg.model.backbone.init_cfg.checkpoint
    assert url == RELEASED_URL.format(SMALL)
    assert hub_cache_path(url) == str(offline / SMALL)
    sd = small_file(offline / SMALL, seed=1)  # what a first run (or the user) put there

    check_pretrained(cfg, RECIPE, download=True)  # finds it: no download tried
    model = backbone(cfg)
    model.init_weights()
    assert torch.equal(model.blocks[1].attn.qkv.weight, sd['blocks.1.attn.qkv.weight'])
    assert torch.equal(model.pos_embed, sd['pos_embed'])
    # the cache mmengine's loader reads for the same URL (load_from_http)
    theirs = CheckpointLoader.load_checkpoint(url, map_location='cpu')
    assert torch.equal(theirs['model']['blocks.1.attn.qkv.weight'], sd['blocks.1.attn.qkv.weight'])

    # a local file given explicitly wins over the cached release
    local = small_file(tmp_path / 'mine.pth', seed=2)
    cfg.model.backbone.init_cfg.checkpoint = str(tmp_path / 'mine.pth')
    model = backbone(cfg)
    model.init_weights()
    assert torch.equal(model.blocks[1].attn.qkv.weight, local['blocks.1.attn.qkv.weight'])


def test_offline_without_the_file_names_the_url_and_where_to_put_it(offline):
    cfg = Config.fromfile(config(RECIPE))
    url = RELEASED_URL.format(SMALL)
    with pytest.raises(CheckpointError) as err:
        check_pretrained(cfg, RECIPE, download=True)
    message = str(err.value)
    assert '\n' not in message
    for part in (RECIPE, KEY, f'cannot download {url}', str(offline / SMALL), DOCS):
        assert part in message, (part, message)
    # the same from the model itself (a script that builds it without tools/train.py)
    with pytest.raises(CheckpointError, match=f'cannot download {url}.*{offline / SMALL}'):
        backbone(cfg).init_weights()
    assert not list(offline.iterdir())  # no half-written file left in the cache


def test_missing_or_truncated_local_file_names_key_and_fix(tmp_path):
    assert osp.isfile(osp.join(REPO, DOCS))  # the page the messages cite
    cfg = Config.fromfile(config(RECIPE))
    cfg.model.backbone.init_cfg.checkpoint = f'checkpoints/{SMALL}'  # the old recipes' path
    with pytest.raises(FileNotFoundError) as err:
        check_pretrained(cfg, RECIPE)
    message = str(err.value)
    for part in (KEY, f"'checkpoints/{SMALL}' does not exist", RELEASED_URL.format(SMALL),
                 f'--cfg-options {KEY}=PATH', DOCS):
        assert part in message, (part, message)

    small_file(tmp_path / SMALL, seed=0)
    data = (tmp_path / SMALL).read_bytes()
    (tmp_path / SMALL).write_bytes(data[:len(data) // 2])  # an interrupted copy
    cfg.model.backbone.init_cfg.checkpoint = str(tmp_path / SMALL)
    with pytest.raises(CheckpointError, match=f'{KEY}: .*{SMALL}.* is truncated'):
        check_pretrained(cfg, RECIPE)


def test_train_refuses_a_missing_checkpoint_before_building(toy_root, tmp_path):
    recipe = tmp_path / 'pretrained.py'
    recipe.write_text(f"_base_ = ['{config('toy/vit5-tiny_upernet_shapes.py')}']\n"
                      "model = dict(backbone=dict(init_cfg=dict(_delete_=True, type='Pretrained', "
                      "checkpoint='nowhere/vit5.pth')))\n")
    work = tmp_path / 'work'
    code, out = run_tool(tool('train.py') + [str(recipe), '--work-dir', str(work)],
                         cwd=toy_root, check=False)
    last = out.strip().splitlines()[-1]
    assert code != 0 and 'Traceback' not in out, out[-3000:]
    assert last.startswith('[train] FileNotFoundError: ') and KEY in last, last
    assert "'nowhere/vit5.pth' does not exist" in last and DOCS in last, last
    assert not work.exists()  # the runner was never built

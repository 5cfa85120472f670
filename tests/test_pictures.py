"""The picture tools: token-norm maps with/without registers, training curves from logs."""
import glob
import json
import os.path as osp

import pytest
import torch

import reference_vit5 as ref
from conftest import REPO, run_tool, tool

pytestmark = pytest.mark.slow  # trains and runs the picture tools


def test_visualize_tokens_writes_png(toy_root, tmp_path):
    sd = ref.released_state_dict(64, 2, 2, img_size=64, num_classes=10)
    ckpt = tmp_path / 'tiny.pth'
    torch.save(ref.released_checkpoint(sd), ckpt)
    image = sorted(glob.glob(osp.join(toy_root, 'data/toy/coco/val2017/*.jpg')))[0]
    out = tmp_path / 'tokens.png'
    log = run_tool(tool('visualize_tokens.py') + [image, '--checkpoint', str(ckpt), '--arch',
                                                  "{'embed_dim': 64, 'depth': 2, 'num_heads': 2}",
                                                  '--img-size', '64', '--size', '96', '--out',
                                                  str(out)], cwd=REPO)
    assert 'wrote' in log and out.stat().st_size > 10_000


def test_plot_curves_reads_mmengine_scalars(tmp_path):
    run = tmp_path / 'work' / '20260101_000000' / 'vis_data'
    run.mkdir(parents=True)
    records = [dict(loss=2.0 - i / 10, iter=i * 10, step=i * 10) for i in range(1, 6)]
    records.append({'coco/bbox_mAP': 0.25, 'step': 50})
    (run / 'scalars.json').write_text('\n'.join(json.dumps(r) for r in records))
    out = tmp_path / 'curves.png'
    log = run_tool(tool('plot_curves.py') + [str(tmp_path / 'work'), '--out', str(out)], cwd=REPO)
    assert '6 records' in log and out.stat().st_size > 10_000

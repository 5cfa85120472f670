"""End to end through tools/train.py and tools/test.py on the generated COCO / ADE20K sets."""
import glob
import json
import os.path as osp
import re

import pytest

from conftest import config, run_tool, tool

MASKRCNN = 'toy/vit5-tiny_maskrcnn_shapes.py'
UPERNET = 'toy/vit5-tiny_upernet_shapes.py'
SHORT = ['train_cfg.max_iters=4', 'train_cfg.val_interval=4',
         'default_hooks.checkpoint.interval=4']


def metrics_of(output):
    lines = [line for line in output.splitlines() if line.startswith('[test] metrics ')]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len('[test] metrics '):])


@pytest.mark.parametrize('cfg, keys', [
    (MASKRCNN, ['coco/bbox_mAP', 'coco/segm_mAP', 'coco/bbox_mAP_50']),
    (UPERNET, ['mIoU', 'aAcc']),
])
def test_train_then_test(toy_root, tmp_path, cfg, keys):
    work = tmp_path / 'work'
    out = run_tool(tool('train.py') + [config(cfg), '--work-dir', str(work),
                                       '--cfg-options', *SHORT], cwd=toy_root)
    assert 'Saving checkpoint at 4 iterations' in out
    assert re.search(r'Iter\(val\).*(bbox_mAP|mIoU)', out), out[-3000:]
    ckpt = work / 'iter_4.pth'
    assert ckpt.is_file() and (work / 'last_checkpoint').read_text().strip().endswith('iter_4.pth')
    show = tmp_path / 'show'
    out = run_tool(tool('test.py') + [config(cfg), str(ckpt), '--work-dir', str(tmp_path / 't'),
                                      '--show-dir', str(show)], cwd=toy_root)
    metrics = metrics_of(out)
    for key in keys:
        assert key in metrics and 0.0 <= metrics[key] <= 100.0, metrics
    assert glob.glob(osp.join(show, '**', '*.png'), recursive=True) or \
        glob.glob(osp.join(tmp_path, 't', '**', '*.png'), recursive=True) or \
        glob.glob(osp.join(work, '**', '*.png'), recursive=True)


def test_config_without_custom_imports_is_refused(toy_root, tmp_path):
    bad = tmp_path / 'forgot_imports.py'
    bad.write_text(f"_base_ = ['{config(UPERNET)}']\ncustom_imports = dict(imports=[])\n")
    code, out = run_tool(tool('train.py') + [str(bad), '--work-dir', str(tmp_path / 'w')],
                         cwd=toy_root, check=False)
    assert code != 0 and "custom_imports = dict(imports=['mmvit5']" in out


def test_missing_data_root_is_refused(tmp_path):
    code, out = run_tool(tool('train.py') + [config(MASKRCNN), '--work-dir', str(tmp_path / 'w')],
                         cwd=tmp_path, check=False)
    assert code != 0 and "data_root 'data/toy/coco/' does not exist" in out
    assert not (tmp_path / 'w').exists()

"""End to end through tools/train.py and tools/test.py on the generated COCO / ADE20K sets."""
import glob
import json
import os.path as osp
import re

import pytest
from slurm_cluster import free_port

from conftest import REPO, config, run_tool, tool

pytestmark = pytest.mark.slow  # trains, tests and runs the tools in subprocesses

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
    drawn = [f for f in glob.glob(osp.join(show, '**', '*.*'), recursive=True)
             if f.endswith(('.png', '.jpg'))]
    assert len(drawn) == 4, drawn  # one per validation image
    image = sorted(glob.glob(osp.join(toy_root, 'data/toy/coco/val2017/*.jpg')))[0]
    run_tool(tool('demo.py') + [config(cfg), str(ckpt), image, '--out-dir', str(tmp_path / 'demo'),
                                '--score-thr', '0.0'], cwd=toy_root)
    png = tmp_path / 'demo' / (osp.splitext(osp.basename(image))[0] + '.png')
    assert png.is_file() and png.stat().st_size > 1000


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


def test_distributed_training_two_processes_with_checkpointing(toy_root, tmp_path):
    """torchrun, 2 CPU processes (gloo), activation checkpointing under DDP."""
    work = tmp_path / 'work'
    out = run_tool(['bash', osp.join(REPO, 'tools', 'dist_train.sh'), config(MASKRCNN), '2',
                    '--work-dir', str(work), '--cfg-options', 'env_cfg.dist_cfg.backend=gloo',
                    'model.backbone.with_cp=True',
                    'train_cfg.max_iters=3', 'train_cfg.val_interval=3',
                    'default_hooks.checkpoint.interval=3'],
                   cwd=toy_root, env=dict(PORT=str(free_port()), OMP_NUM_THREADS='1'))
    assert 'Distributed training: True' in out and 'GPU number: 2' in out  # = world size
    assert 'Expected to mark a variable ready only once' not in out
    assert (work / 'iter_3.pth').is_file()
    assert re.search(r'Iter\(val\).*bbox_mAP', out), out[-3000:]


def test_amp_training_stays_finite(toy_root, tmp_path):
    """--amp with bf16 autocast forced: without CUDA the tools pick it only on CPUs with native
    bf16 (test_configs.py), so it is forced here to test its numerics on every CPU."""
    work = tmp_path / 'amp'
    iters = 40
    out = run_tool(tool('train.py') + [config(UPERNET), '--amp', '--work-dir', str(work),
                                       '--cfg-options', 'optim_wrapper.type=AutocastOptimWrapper',
                                       f'train_cfg.max_iters={iters}',
                                       f'train_cfg.val_interval={iters}'], cwd=toy_root)
    assert "type='AutocastOptimWrapper'" in out
    losses = [float(v) for v in re.findall(r'\bloss: ([0-9.eE+-]+|nan|inf)', out)]
    assert len(losses) >= iters // 10 and all(map(lambda v: v == v and v < 1e4, losses))
    assert losses[-1] < losses[0]  # it learns under autocast
    assert re.search(r'Iter\(val\).*mIoU: [0-9]', out)

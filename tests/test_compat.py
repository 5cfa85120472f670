"""The upstream patches of mmvit5.compat: each fails without it, is declared with its versions
and can be turned off; mmengine 0.10.7 resume on torch >= 2.6 without opening the door."""
import argparse
import copy
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.runner import Runner
from packaging.requirements import Requirement
from torch.utils.data import Dataset

import mmvit5  # noqa: F401  applies the allow-list
from compat_probes import SKIP
from mmvit5 import compat
from mmvit5.models import ViT5


class TinyClassifier(BaseModel):
    def __init__(self):
        super().__init__()
        self.backbone = ViT5(arch=dict(embed_dim=32, depth=2, num_heads=2), img_size=32,
                             out_type='cls_token', drop_path_rate=0.1)
        self.head = nn.Linear(32, 3)

    def forward(self, inputs, labels, mode='loss'):
        logits = self.head(self.backbone(torch.stack(inputs))[0])
        return dict(loss=nn.functional.cross_entropy(logits, torch.stack(labels)))


class Shapes(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.randn(3, 32, 32, generator=g)
        if np.random.rand() < 0.5:  # an augmentation drawn in the main process
            image = image.flip(-1)
        return dict(inputs=image, labels=torch.tensor(i % 3))


def runner(work_dir, max_iters, resume=False, seed=0):
    torch.manual_seed(0)  # the model is built before the Runner seeds anything
    return Runner(
        model=TinyClassifier(), work_dir=str(work_dir), resume=resume,
        train_dataloader=dict(dataset=Shapes(), batch_size=4, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05)),
        param_scheduler=[dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                              end=4)],
        train_cfg=dict(by_epoch=False, max_iters=max_iters, val_interval=1000),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=3),
                           logger=dict(type='LoggerHook', interval=1)),
        custom_hooks=[dict(type='RNGStateHook')],
        randomness=dict(seed=seed, deterministic=True),
        # a logger of its own: one named by the timestamp alone is shared with a Runner built
        # in the same second, and writes to the stdout of the test that built that one
        experiment_name=f'{work_dir}{max_iters}{resume}{seed}')


@pytest.mark.slow  # trains three runs
def test_resume_equals_uninterrupted_run(tmp_path):
    """Drop path is on, and a flip drawn in the main process: equality also needs the RNG
    states that RNGStateHook keeps, put back after mmengine has skipped the trained batches."""
    full = runner(tmp_path / 'full', 6)
    full.train()
    first = runner(tmp_path / 'part', 3)
    first.train()
    assert (tmp_path / 'part' / 'iter_3.pth').is_file()
    # weights_only=True is torch's default here: the mmengine checkpoint must load as is
    torch.load(tmp_path / 'part' / 'iter_3.pth', weights_only=True)
    resumed = runner(tmp_path / 'part', 6, resume=True)
    resumed.train()
    assert resumed.iter == 6
    ours, ref = resumed.model.state_dict(), full.model.state_dict()
    for key in ref:
        assert torch.equal(ours[key], ref[key]), key
    opt_ours = resumed.optim_wrapper.optimizer.state_dict()
    opt_ref = full.optim_wrapper.optimizer.state_dict()
    for index, state in opt_ref['state'].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(opt_ours['state'][index][name]),
                               torch.as_tensor(value)), (index, name)
    assert opt_ours['param_groups'][0]['lr'] == opt_ref['param_groups'][0]['lr']


def test_resume_under_another_seed_says_the_data_order_changes(tmp_path, capsys):
    """mmengine draws the data order from the seed it builds the run with; resuming under
    another one (not through tools/train.py, which takes the checkpoint's) is named."""
    runner(tmp_path, 3).train()
    runner(tmp_path, 3, resume=True, seed=1).train()
    assert ('the training data order was drawn with seed 1, the checkpoint was trained with '
            'seed 0') in capsys.readouterr().out


class Exploit:
    """A pickle that asks for getattr on something other than mmengine's HistoryBuffer."""

    def __reduce__(self):
        return getattr, (argparse.Namespace, '__init__')


def test_allow_list_does_not_allow_arbitrary_getattr(tmp_path):
    path = tmp_path / 'exploit.pth'
    torch.save({'x': Exploit()}, path)
    with pytest.raises(pickle.UnpicklingError, match="only the statistics methods"):
        torch.load(path, weights_only=True)


def test_unlisted_globals_stay_blocked(tmp_path):
    path = tmp_path / 'other.pth'
    torch.save({'x': copy.copy}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)


def test_atomic_open_replaces_whole_files_only(tmp_path):
    from mmvit5.utils.atomic_file import atomic_open
    target = tmp_path / 'last_checkpoint'
    target.write_text('iter_4.pth')
    try:
        with atomic_open(target, 'w') as f:
            f.write('iter_')
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert target.read_text() == 'iter_4.pth' and not list(tmp_path.glob('*.part'))
    with atomic_open(target, 'w') as f:
        f.write('iter_8.pth')
    assert target.read_text() == 'iter_8.pth'
    with pytest.raises(ValueError, match='must contain "w"'):
        with atomic_open(target, 'ab'):
            pass


def test_mmengine_writes_checkpoints_atomically():
    from mmengine.fileio.backends import local_backend
    from mmengine.hooks import checkpoint_hook

    from mmvit5.utils.atomic_file import open_atomic_writes
    assert local_backend.open is open_atomic_writes and checkpoint_hook.open is open_atomic_writes
    assert checkpoint_hook.CheckpointHook._save_checkpoint_with_step._mmvit5


def test_mmcv_roi_align_reads_channels_last_maps():
    """mmcv 2.1.0's RoIAlign ignores strides (a channels-last map pooled the wrong locations,
    by up to 3 on unit-variance input); after ``import mmvit5`` it matches torchvision's
    stride-aware roi_align on contiguous and channels-last maps, and so do its gradients."""
    from mmcv.ops import RoIAlign
    from torchvision.ops import roi_align

    torch.manual_seed(0)
    rois = torch.tensor([[0, 1., 1., 10., 12.], [1, 3., 2., 15., 9.]])
    base = torch.randn(2, 8, 16, 16)
    for layout in (torch.contiguous_format, torch.channels_last):
        x = base.contiguous(memory_format=layout).requires_grad_()
        x_ref = base.clone().requires_grad_()
        out = RoIAlign(7, 0.5, sampling_ratio=0, aligned=True)(x, rois)
        expected = roi_align(x_ref, rois, 7, 0.5, sampling_ratio=0, aligned=True)
        torch.testing.assert_close(out, expected)
        grad, = torch.autograd.grad(out.square().sum(), x)
        grad_ref, = torch.autograd.grad(expected.square().sum(), x_ref)
        torch.testing.assert_close(grad, grad_ref)


PROBES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'compat_probes.py')


def probe(name, work_dir, disable=''):
    work_dir.mkdir()
    env = dict(os.environ, MMVIT5_DISABLE_PATCHES=disable, OMP_NUM_THREADS='1',
               PYTHONPATH=os.path.dirname(os.path.dirname(PROBES)))
    return subprocess.Popen([sys.executable, PROBES, name, str(work_dir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# patch -> what the upstream code raises without it (tests/compat_probes.py runs the behaviour)
UPSTREAM_ERRORS = {
    'allow_mmengine_checkpoints': 'Unsupported global: GLOBAL mmengine.logging.history_buffer',
    'allow_cpu_distributed': r'(NVIDIA driver|not compiled with CUDA|CUDA)',
    'allow_cpu_slurm': r'(NVIDIA driver|not compiled with CUDA|CUDA)',
    'crash_safe_checkpoints': r"FileNotFoundError: .*iter_1\.pth",
    'contiguous_roi_align': 'Tensor-likes are not close',
    'format_config_once': r'formatted the same config [2-9]\d* times',
    'no_epoch_sleep_without_workers': r'slept 4 s at 2 restarts of a loader without workers',
    'skip_unimportable_multimodal': 'NoneType takes no arguments',
    # setuptools < 81 warns; from 81 on it has no pkg_resources at all
    'installed_packages_without_pkg_resources':
        r"(pkg_resources is deprecated|No module named 'pkg_resources')",
}


@pytest.mark.slow  # two fresh processes each
@pytest.mark.parametrize('name', sorted(UPSTREAM_ERRORS))
def test_patch_fixes_what_fails_without_it(name, tmp_path):
    """The behaviour fails with the patch off (MMVIT5_DISABLE_PATCHES) and works with it on;
    both in fresh processes, side by side."""
    off = probe(name, tmp_path / 'off', disable=name)
    on = probe(name, tmp_path / 'on')
    (off_out, _), (on_out, _) = off.communicate(timeout=300), on.communicate(timeout=300)
    if on.returncode == SKIP:
        pytest.skip(on_out.strip().splitlines()[-1])
    assert on.returncode == 0, on_out[-3000:]
    assert off.returncode not in (0, SKIP), off_out[-3000:]
    assert re.search(UPSTREAM_ERRORS[name], off_out), off_out[-3000:]


def test_every_patch_is_declared_and_probed():
    assert set(compat.PATCHES) == set(UPSTREAM_ERRORS)
    for patch in compat.PATCHES.values():
        assert patch.applies_to and patch.reason, patch.name
        for requirement in patch.applies_to:
            Requirement(requirement)  # parses


def test_versions_outside_the_range_skip_the_patch(monkeypatch):
    applied = []
    monkeypatch.setitem(compat.PATCHES, 'probe_patch', compat.Patch(
        'probe_patch', ('torch<1.0',), 'a bug fixed in torch 1.0', lambda: applied.append(1),
        ('torch', )))
    status = compat.apply_patches(['probe_patch'])
    assert not applied
    assert status['probe_patch'].startswith('not applied: installed torch ')
    assert 'outside torch<1.0' in status['probe_patch']
    monkeypatch.setitem(compat.PATCHES, 'probe_patch', compat.Patch(
        'probe_patch', ('torch>=1.0', 'not-a-package>=1'), 'why', lambda: applied.append(1),
        ('torch', )))
    assert compat.apply_patches(['probe_patch']) == {
        'probe_patch': 'not applied: not-a-package is not installed'}
    monkeypatch.setitem(compat.PATCHES, 'probe_patch', compat.Patch(
        'probe_patch', ('torch>=1.0', ), 'why', lambda: applied.append(1), ('torch', )))
    assert compat.apply_patches(['probe_patch']) == {'probe_patch': 'applied'} and applied


@pytest.mark.parametrize('value, expected', [
    ('', set()), ('all', None), ('crash_safe_checkpoints, contiguous_roi_align',
                                 {'crash_safe_checkpoints', 'contiguous_roi_align'}),
])
def test_disable_switch(monkeypatch, value, expected):
    monkeypatch.setenv(compat.DISABLE_ENV, value)
    assert compat.disabled_patches() == (set(compat.PATCHES) if expected is None else expected)


def test_docs_list_every_patch():
    """docs/en/advanced/upstream_patches.md holds markdown_table() as generated."""
    page = os.path.join(os.path.dirname(os.path.dirname(PROBES)), 'docs', 'en', 'advanced',
                        'upstream_patches.md')
    with open(page) as f:
        text = f.read()
    assert compat.markdown_table() in text, 'regenerate the table: see the page'

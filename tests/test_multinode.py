"""torchrun across "nodes" on loopback (tools/dist_train.sh with NNODES=2), the same model on
every rank, resuming on another number of processes, and start-up failures that end every
rank instead of hanging."""
import os
import os.path as osp
import subprocess

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.config import Config
from mmengine.registry import PARAM_SCHEDULERS
from slurm_cluster import free_port
from test_e2e import MASKRCNN, UPERNET

import mmvit5  # noqa: F401  allow-lists what mmengine checkpoints hold
import reference_vit5 as ref
from conftest import REPO, config, run_tool, tool

pytestmark = pytest.mark.slow
DIST_TRAIN = osp.join(REPO, 'tools', 'dist_train.sh')
GLOO = 'env_cfg.dist_cfg.backend=gloo'
NO_VAL = 'train_cfg.val_begin=1000'


def launch_nodes(cmds, cwd, timeout):
    """Start one torchrun "node" per command line at once; return their (code, output)."""
    port = str(free_port())
    procs = []
    for rank, cmd in enumerate(cmds):
        env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS='1', NNODES=str(len(cmds)),
                   NODE_RANK=str(rank), MASTER_ADDR='127.0.0.1', PORT=port)
        procs.append(subprocess.Popen(['bash', DIST_TRAIN, *map(str, cmd)], cwd=cwd, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                os.killpg(p.pid, 9)
            raise AssertionError(f'a node still ran after {timeout} s: it hangs')
        results.append((proc.returncode, out))
    return results


@pytest.fixture(scope='module')
def released_backbone(tmp_path_factory):
    """The toy Mask R-CNN's ViT-5 (96 wide, 4 blocks, 3 heads) as a released-layout file."""
    sd = ref.released_state_dict(96, 4, 3, img_size=64, num_classes=10)
    path = tmp_path_factory.mktemp('released') / 'vit5_toy_released.pth'
    torch.save(ref.released_checkpoint(sd), path)
    return path


def test_two_nodes_train_the_same_model(toy_root, tmp_path, released_backbone):
    """Released-layout weights on two "nodes" (one process each), then the mmengine-layout
    checkpoint they wrote, with activation checkpointing: identical on both ranks each time."""
    cfg = tmp_path / 'pretrained.py'
    cfg.write_text(f"_base_ = ['{config(MASKRCNN)}']\nmodel = dict(backbone=dict(init_cfg=dict("
                   f"_delete_=True, type='Pretrained', checkpoint='{released_backbone}')))\n")
    work = tmp_path / 'work'
    short = ['--cfg-options', GLOO, NO_VAL, 'train_cfg.max_iters=1',
             'default_hooks.checkpoint.interval=1']
    results = launch_nodes([[cfg, 1, '--work-dir', work, *short]] * 2, toy_root, timeout=600)
    for code, out in results:
        assert code == 0, out[-3000:]
    out = results[0][1]
    assert 'Distributed training: True' in out and 'GPU number: 2' in out
    assert 'same model on all 2 ranks at iteration 0, after loading' in out, out[-3000:]
    assert 'same model on all 2 ranks after the optimizer step of iteration 0' in out
    assert (work / 'iter_1.pth').is_file()

    out = run_tool(['bash', DIST_TRAIN, config(MASKRCNN), '2', '--work-dir', tmp_path / 'cp',
                    *short, 'model.backbone.with_cp=True', f'load_from={work / "iter_1.pth"}'],
                   cwd=toy_root, env=dict(PORT=str(free_port()), OMP_NUM_THREADS='1'))
    assert 'Load checkpoint from' in out
    assert 'same model on all 2 ranks at iteration 0, after loading' in out, out[-3000:]
    assert 'same model on all 2 ranks after the optimizer step of iteration 0' in out


def _perturbed_rank(rank, port, queue):
    torch.distributed.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}',
                                         rank=rank, world_size=2)
    from mmvit5.engine import check_same_on_all_ranks
    from mmvit5.models import ViT5
    torch.manual_seed(0)
    model = ViT5(arch=dict(embed_dim=32, depth=2, num_heads=2), img_size=32)
    name, buffer = list(model.named_buffers())[-1]
    if rank == 1:
        buffer.data[0] += 1e-6
    try:
        check_same_on_all_ranks(model, 'in the test')
        queue.put((rank, name, None))
    except RuntimeError as e:
        queue.put((rank, name, str(e)))


def test_a_different_buffer_on_one_rank_is_named():
    ctx = mp.get_context('spawn')
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_perturbed_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for rank, name, error in results:
        assert error is not None, f'rank {rank} saw no difference'
        assert f'holds a different {name!r}' in error


def lr_after(cfg_path, steps):
    """The learning rate the config's schedule gives after ``steps`` iterations (mmengine's
    own schedulers on a one-parameter optimizer)."""
    cfg = Config.fromfile(cfg_path)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))],
                          lr=cfg.optim_wrapper.optimizer.lr)
    schedulers = [PARAM_SCHEDULERS.build(dict(s, optimizer=opt)) for s in cfg.param_scheduler]
    for _ in range(steps):
        for s in schedulers:
            s.step()
    return opt.param_groups[0]['lr']


def saved_lr(path):
    ckpt = torch.load(path, weights_only=True)
    return ckpt['meta'], max(g['lr'] for g in ckpt['optimizer']['param_groups'])


def test_resume_on_another_number_of_processes(toy_root, tmp_path):
    """2 processes -> 1 (unscaled, warned) -> 2 with --auto-scale-lr (scaled by 2)."""
    work = tmp_path / 'work'
    opts = ['--cfg-options', GLOO, NO_VAL, 'default_hooks.checkpoint.interval=2']
    env = dict(PORT=str(free_port()), OMP_NUM_THREADS='1')
    run_tool(['bash', DIST_TRAIN, config(UPERNET), '2', '--work-dir', work, *opts,
              'train_cfg.max_iters=2'], cwd=toy_root, env=env)
    meta, lr = saved_lr(work / 'iter_2.pth')
    assert (meta['iter'], meta['world_size'], meta['batch_size']) == (2, 2, 4)
    assert lr == pytest.approx(lr_after(config(UPERNET), 2), rel=1e-6)

    out = run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(work), '--resume',
                                       *opts, 'train_cfg.max_iters=4'], cwd=toy_root)
    assert 'resumed epoch: 0, iter: 2' in out and 'Advance dataloader 2 steps' in out
    assert 'total batch 4; the checkpoint was trained with 2 x 4 = 8' in out, out[-3000:]
    assert 'train_dataloader.batch_size=8 per process' in out and '--auto-scale-lr' in out
    meta, lr = saved_lr(work / 'iter_4.pth')
    assert (meta['iter'], meta['world_size']) == (4, 1)
    assert lr == pytest.approx(lr_after(config(UPERNET), 4), rel=1e-6)  # the same schedule

    out = run_tool(['bash', DIST_TRAIN, config(UPERNET), '2', '--work-dir', work, '--resume',
                    '--auto-scale-lr', *opts, 'train_cfg.max_iters=6'], cwd=toy_root, env=env)
    assert 'resumed epoch: 0, iter: 4' in out and 'scaled by 2 (linear scaling rule)' in out
    meta, lr = saved_lr(work / 'iter_6.pth')
    assert (meta['iter'], meta['world_size']) == (6, 2)
    assert lr == pytest.approx(2 * lr_after(config(UPERNET), 6), rel=1e-6)


@pytest.mark.parametrize('fault', ['bad config', 'missing checkpoint'])
def test_startup_failure_on_one_node_ends_every_rank(toy_root, tmp_path, fault):
    """Node 1 fails at start-up; node 0 must end too, with the error, not wait in a collective.
    Both faults end node 1 before the process group exists (tools/train.py checks the
    checkpoints a config loads before it builds anything): node 0 waits in its rendezvous until
    env_cfg.dist_cfg.timeout, 10 s, for a node that never comes."""
    timeout = 10
    good = [config(UPERNET), 1, '--work-dir', tmp_path / 'w', '--cfg-options', GLOO, NO_VAL,
            'train_cfg.max_iters=2', f'env_cfg.dist_cfg.timeout={timeout}']
    if fault == 'bad config':
        bad = [tmp_path / 'missing.py', *good[1:]]
        error = 'missing.py'
    else:
        good.append(f'load_from={tmp_path / "on_node_0.pth"}')
        torch.save({'state_dict': {}}, tmp_path / 'on_node_0.pth')
        bad = [*good[:-1], f'load_from={tmp_path / "only_on_node_0.pth"}']
        error = 'only_on_node_0.pth'
    (code0, out0), (code1, out1) = launch_nodes([good, bad], toy_root, timeout=300)
    assert code1 != 0 and error in out1, out1[-3000:]
    assert code0 != 0, out0[-3000:]
    # node 0 gave up waiting for node 1 after the set timeout
    assert f'wait timeout after {timeout * 1000}ms' in out0, out0[-3000:]

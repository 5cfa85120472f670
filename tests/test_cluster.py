"""tools/slurm_train.sh and tools/slurm_test.sh through a real single-node SLURM cluster
(tests/slurm_cluster.py): 2 CPU tasks (gloo, GPUS_PER_NODE=0), real metrics, and a job whose
task dies mid-run is killed as a whole and resumes from its work dir."""
import os
import os.path as osp
import signal
import subprocess
import time

import pytest
from slurm_cluster import PARTITION, free_port
from test_e2e import MASKRCNN, UPERNET, metrics_of

from conftest import REPO, config, run_tool

pytestmark = pytest.mark.slow
GLOO = 'env_cfg.dist_cfg.backend=gloo'
# no validation during training: slurm_test.sh evaluates
NO_VAL = 'train_cfg.val_begin=1000'


def slurm_env(cluster, tasks=2):
    return dict(cluster.env, GPUS=str(tasks), GPUS_PER_NODE='0', CPUS_PER_TASK='1',
                MASTER_PORT=str(free_port()), OMP_NUM_THREADS='1')


def slurm_tool(script, job, *args):
    return ['bash', osp.join(REPO, 'tools', script), PARTITION, job, *map(str, args)]


@pytest.mark.parametrize('cfg, keys', [
    (UPERNET, ['mIoU', 'aAcc']),
    (MASKRCNN, ['coco/bbox_mAP', 'coco/segm_mAP']),
])
def test_slurm_train_then_test(slurm_cluster, toy_root, tmp_path, cfg, keys):
    work = tmp_path / 'work'
    out = run_tool(slurm_tool('slurm_train.sh', 'toy-train', config(cfg), work, '--cfg-options',
                              GLOO, NO_VAL, 'train_cfg.max_iters=2',
                              'default_hooks.checkpoint.interval=2'),
                   cwd=toy_root, env=slurm_env(slurm_cluster), timeout=600)
    assert 'Distributed training: True' in out and 'GPU number: 2' in out, out[-3000:]
    assert (work / 'iter_2.pth').is_file()
    out = run_tool(slurm_tool('slurm_test.sh', 'toy-test', config(cfg), work / 'iter_2.pth',
                              '--work-dir', tmp_path / 'test', '--cfg-options', GLOO),
                   cwd=toy_root, env=slurm_env(slurm_cluster), timeout=600)
    metrics = metrics_of(out)
    for key in keys:
        assert key in metrics and 0.0 <= metrics[key] <= 100.0, metrics


def task_pids(work_dir, rank):
    """Pids of the training processes of SLURM task ``rank`` that write into ``work_dir``."""
    pids = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmdline = f.read().decode(errors='replace')
            with open(f'/proc/{pid}/environ', 'rb') as f:
                environ = f.read().split(b'\0')
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if 'train.py' in cmdline and str(work_dir) in cmdline and \
                f'SLURM_PROCID={rank}'.encode() in environ:
            pids.append(int(pid))
    return pids


def test_task_killed_mid_run_ends_the_job_which_then_resumes(slurm_cluster, toy_root, tmp_path):
    work = tmp_path / 'work'
    options = ['--cfg-options', GLOO, NO_VAL, 'train_cfg.max_iters=40',
               'default_hooks.checkpoint.interval=2']
    job = subprocess.Popen(slurm_tool('slurm_train.sh', 'toy-killed', config(UPERNET), work,
                                      *options),
                           cwd=toy_root, env=dict(os.environ, PYTHONPATH=REPO,
                                                  **slurm_env(slurm_cluster)),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not (work / 'last_checkpoint').is_file():
        assert job.poll() is None and time.time() < deadline, 'no checkpoint before the kill'
        time.sleep(0.2)
    victims = task_pids(work, rank=1)
    assert victims, 'task 1 not found'
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    out, _ = job.communicate(timeout=120)  # rank 0 must not be left waiting in a collective
    assert job.returncode != 0, out[-3000:]
    assert not task_pids(work, rank=0), 'task 0 outlived the job'
    assert not (work / 'iter_40.pth').exists()
    resumed_at = int(osp.basename((work / 'last_checkpoint').read_text().strip())[5:-4])
    out = run_tool(slurm_tool('slurm_train.sh', 'toy-resumed', config(UPERNET), work,
                              '--resume', *options[:-2], f'train_cfg.max_iters={resumed_at + 2}',
                              'default_hooks.checkpoint.interval=2'),
                   cwd=toy_root, env=slurm_env(slurm_cluster), timeout=600)
    assert f'resumed epoch: 0, iter: {resumed_at}' in out, out[-3000:]
    assert (work / f'iter_{resumed_at + 2}.pth').is_file()

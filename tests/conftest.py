import contextlib
import json
import os
import os.path as osp
import random
import re
import runpy
import subprocess
import sys

import numpy as np
import pytest
import torch

# Without CUDA, the Triton kernels (mmvit5.models.layers.kernels) run in Triton's interpreter
# when a test forces them (MMVIT5_TRITON=1). Triton reads the variable when the kernels are
# decorated, that is when mmvit5 is first imported: hence here, before any test module.
if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, osp.join(REPO, 'tools'))
SUITE_RESULTS = osp.join(REPO, 'results', 'test_suite.json')

# tools/run_tests.sh runs the suite in pytest-xdist workers, one per core: each worker and the
# tools its tests start then take one OpenMP thread (more would only contend for the cores);
# a run in one process keeps two
WORKERS = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
THREADS = '1' if WORKERS > 1 else '2'
if WORKERS > 1:
    os.environ['OMP_NUM_THREADS'] = THREADS
    torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), each test file runs on one worker, so that
    its module fixtures (a trained toy, an exported graph) are built once; a group named by
    ``pytest.mark.xdist_group`` (the SLURM cluster) spans files. The files go out longest
    first, as long as the last whole-suite run (results/test_suite.json) measured them, so
    that the workers finish together instead of one training alone at the end."""
    if WORKERS == 1:
        return
    for item in items:
        if item.get_closest_marker('xdist_group') is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split('::')[0]))
    seconds = {}
    if osp.isfile(SUITE_RESULTS):
        with open(SUITE_RESULTS) as f:
            runs = json.load(f)
        for run in [runs, *runs.get('baselines', {}).values()]:  # the latest run that timed them
            seconds = seconds or run.get('files', {})
    # a file not measured yet goes first: it may be long
    items.sort(key=lambda item: -seconds.get(item.nodeid.split('::')[0], float('inf')))


@pytest.fixture(scope='session')
def toy_root(tmp_path_factory):
    """A folder holding data/toy/{coco,ade} in the real file layouts (tools/make_toy_data.py)."""
    from make_toy_data import make_dataset
    root = tmp_path_factory.mktemp('toy')
    make_dataset(str(root / 'data' / 'toy'), train=8, val=4, size=160, seed=0)
    return root


@pytest.fixture(scope='session')
def slurm_cluster(tmp_path_factory):
    """A running single-node SLURM cluster (tests/slurm_cluster.py); skips where there is none."""
    from slurm_cluster import ClusterUnavailable, start_cluster
    try:
        cluster = start_cluster(str(tmp_path_factory.mktemp('slurm')))
    except ClusterUnavailable as e:
        pytest.skip(f'no SLURM cluster: {e}')
    yield cluster
    cluster.stop()


def run_tool(args, cwd, timeout=900, env=None, check=True):
    """Run ``python tools/<script> ...`` (or torchrun) from ``cwd``; return stdout+stderr."""
    full_env = dict(os.environ, OMP_NUM_THREADS=THREADS,
                    PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    full_env.update(env or {})
    proc = subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f'{" ".join(map(str, args))} failed ({proc.returncode}):\n'
                             f'{output[-6000:]}')
    return output if check else (proc.returncode, output)


def run_tool_here(script, args, cwd, monkeypatch, capsys) -> str:
    """``python tools/<script> ARGS`` in this process (saves the ~5 s of imports of a new one);
    returns what it printed. What the tool leaves in the process (``LOCAL_RANK``, a default
    scope, seeded generators) is undone after the test (``process_as_found``)."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, 'argv', [script, *map(str, args)])
    runpy.run_path(osp.join(REPO, 'tools', script), run_name='__main__')
    return capsys.readouterr().out


@contextlib.contextmanager
def process_as_found():
    """Undo what the body leaves in the process: its environment (tools/train.py sets
    ``LOCAL_RANK``, after which transformers' Trainer starts torch.distributed), mmengine's
    default scope (init_default_scope and a Runner leave theirs: after ``mmdet``, a head's
    build from mmseg's registry finds no SiLogLoss) and the random generators (a runner seeds
    them)."""
    from mmengine.registry import DefaultScope
    environ, scopes = dict(os.environ), DefaultScope._instance_dict.copy()
    generators = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    yield
    os.environ.clear()
    os.environ.update(environ)
    DefaultScope._instance_dict = scopes
    random.setstate(generators[0])
    np.random.set_state(generators[1])
    torch.random.set_rng_state(generators[2])


@pytest.fixture(autouse=True)
def process_left_as_found():
    with process_as_found():
        yield


@pytest.fixture(autouse=True, scope='module')
def module_left_as_found():
    """A worker of pytest-xdist runs many files, in an order that changes with the recorded
    times: what a module's fixtures leave (a toy trained in-process) must not reach the next.
    A session fixture is set up before this one, so one that trains belongs to its module."""
    with process_as_found():
        yield


@pytest.fixture
def one_thread():
    """One torch thread in this process for the test, as ``OMP_NUM_THREADS=1`` gives a tool
    started with the returned env: the toys' runs are deterministic on the CPU at a given thread
    count (bit-equal runs, exact floors), and two threads on the 2 shared cores made their steps
    10-15x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield dict(OMP_NUM_THREADS='1')
    torch.set_num_threads(threads)


def last_val(out: str, metric: str) -> float:
    """The last validation's value of ``metric`` in a training log."""
    return float(re.findall(rf'Iter\(val\).*{metric}: ([0-9.]+)', out)[-1])


def logged_iterations(out: str) -> dict:
    """{iteration: (lr, loss)} as a training run printed them (mmengine's logger, every
    ``default_hooks.logger.interval`` iterations)."""
    rows = re.findall(r'Iter\(train\) \[ *(\d+)/\d+\].* lr: (\S+) .* loss: (\S+) ', out)
    return {int(step): (lr, loss) for step, lr, loss in rows}


def assert_same_training_state(ours, theirs) -> None:
    """Two mmengine checkpoints hold bit-identical weights and optimizer state, and the same
    learning-rate schedulers' state."""
    ours, theirs = (torch.load(path, weights_only=True) for path in (ours, theirs))
    assert ours['state_dict'].keys() == theirs['state_dict'].keys()
    different = [k for k, v in theirs['state_dict'].items()
                 if not torch.equal(ours['state_dict'][k], v)]
    assert not different, f'{len(different)} tensors differ: {different[:5]}'
    moments = [(i, k) for i, state in theirs['optimizer']['state'].items()
               for k, v in state.items()
               if not torch.equal(torch.as_tensor(ours['optimizer']['state'][i][k]),
                                  torch.as_tensor(v))]
    assert not moments, moments[:5]
    assert ours['param_schedulers'] == theirs['param_schedulers']


def assert_same_depth(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Two depth maps (metres) agree to 0.1 % or to 0.1 mm: a relative error alone divides
    float32's ~1e-6 m of noise by a depth near zero (0.22 in a CI run)."""
    torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-4)


def guide_snippets(page):
    """The python snippets of ``docs/en/<page>`` whose first line is ``# <name> ...``, by name
    (onnx.md has one per task)."""
    with open(osp.join(REPO, 'docs', 'en', page)) as f:
        text = f.read()
    return {re.match(r'# (\w+)', s)[1]: s
            for s in re.findall(r'^```python\n(.*?)^```', text, re.DOTALL | re.MULTILINE)
            if re.match(r'# (\w+)', s)}


def small_mask2former(model) -> None:
    """A Mask2Former config (``model``, in place) with one pixel-decoder and one transformer-
    decoder layer and 10 queries, where shrink_model keeps the recipe's 6, 9 and 100-200: the
    same code at a fraction of the cost. At most 10 instances per image: mmdet takes the top
    ``max_per_image`` of the (query, class) pairs."""
    head = model.get('panoptic_head') or model.decode_head
    head.num_queries = 10
    head.pixel_decoder.encoder.num_layers = 1
    head.transformer_decoder.num_layers = 1
    if 'panoptic_fusion_head' in model:
        model.test_cfg.max_per_image = head.num_queries


def tool(name):
    return [sys.executable, osp.join(REPO, 'tools', name)]


def config(name):
    return osp.join(REPO, 'configs', name)


@pytest.fixture(autouse=True)
def no_triton_fallback():
    """A Triton kernel that fails falls back to the PyTorch path with a warning (see
    mmvit5.models.layers.kernels.run_kernel): in a test, that is a failure to report, and the
    next test starts with the kernels allowed again."""
    yield
    from mmvit5.models.layers.kernels import reset_triton_failure, triton_failure
    failure = triton_failure()
    reset_triton_failure()
    assert failure is None, f'a Triton kernel failed, the PyTorch path answered: {failure}'

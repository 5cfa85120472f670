"""Train the same seeded model on compiled mmcv ops and on mmvit5's torchvision backend.

    python tools/compare_mmcv_ops.py [CONFIG] [--iters 5] [--rounds 2] [--work-dir DIR]

Needs compiled mmcv (MMCV_OPS=compiled bash tools/install.sh). Each round trains CONFIG
(default: the toy ViT-5 Mask R-CNN; run from a folder holding its data/toy, see
tools/make_toy_data.py) for ``--iters`` iterations once per backend, the order reversed every
other round; prints every step's losses and gradient norm side by side and whether they are
bit-identical in every round. Step time: round 0 warms the process up (oneDNN builds its
kernels per input shape on first use) and is not timed; each later round gives one ratio of the
two backends' median step times, measured seconds apart, and the median and range of those
ratios are printed.
"""
import argparse
import os.path as osp
import statistics
import sys
import tempfile

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', nargs='?',
                        default=osp.join(REPO, 'configs/toy/vit5-tiny_maskrcnn_shapes.py'))
    parser.add_argument('--iters', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=4, help='round 0 is the warm-up')
    parser.add_argument('--work-dir', default=None)
    return parser.parse_args()


def train_trace(config: str, iters: int, work_dir: str):
    from mmvit5.ops.parity import StepTraceHook
    from mmvit5.utils import build_runner, load_config
    cfg = load_config(config, {'train_cfg.max_iters': iters, 'train_cfg.val_interval': iters + 1,
                               'default_hooks.checkpoint.interval': iters + 1,
                               'default_hooks.logger.interval': 1}, work_dir)
    runner = build_runner(cfg)
    hook = StepTraceHook()
    runner.register_hook(hook)
    runner.train()
    return hook.steps


def main() -> int:
    args = parse_args()
    # mmvit5 first: its import hook decides what mmcv._ext is
    import mmvit5  # noqa: F401,I001
    import mmcv._ext as compiled
    from mmvit5.ops import mmcv_ops_backend
    from mmvit5.ops.parity import served_backend, use_backend
    if mmcv_ops_backend() != 'compiled':
        print('[compare] compiled mmcv is not installed: MMCV_OPS=compiled bash tools/install.sh')
        return 2
    backends = {'compiled': compiled, 'torchvision': served_backend()}
    traces = {name: [] for name in backends}
    work = args.work_dir or tempfile.mkdtemp(prefix='compare_mmcv_ops_')
    for r in range(args.rounds):
        for name in (list(backends) if r % 2 == 0 else list(backends)[::-1]):
            with use_backend(backends[name]):
                traces[name].append(train_trace(args.config, args.iters,
                                                osp.join(work, f'{name}_{r}')))
    first = {name: runs[0] for name, runs in traces.items()}
    keys = [k for k in first['compiled'][0] if k != 'time']
    print('| iter | ' + ' | '.join(f'{k} compiled / torchvision' for k in keys) + ' |')
    print('|---' * (len(keys) + 1) + '|')
    for i, (a, b) in enumerate(zip(first['compiled'], first['torchvision'])):
        print(f'| {i + 1} | ' + ' | '.join(f'{a[k]:.6g} / {b[k]:.6g}' for k in keys) + ' |')
    same = all(a[k] == b[k] for ra, rb in zip(traces['compiled'], traces['torchvision'])
               for a, b in zip(ra, rb) for k in keys)
    print(f'[compare] losses and grad norms bit-identical in every round: {same}')
    ratios = [statistics.median(s['time'] for s in tv[1:]) /
              statistics.median(s['time'] for s in cc[1:])
              for cc, tv in zip(traces['compiled'][1:], traces['torchvision'][1:])]
    if ratios:
        print(f'[compare] step time torchvision / compiled: median {statistics.median(ratios):.3f}'
              f' over {len(ratios)} rounds (range {min(ratios):.3f}-{max(ratios):.3f})')
    return 0 if same else 1


if __name__ == '__main__':
    sys.exit(main())

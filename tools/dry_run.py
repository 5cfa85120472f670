"""Before renting GPUs: what a config costs and how long it runs.

    python tools/dry_run.py configs/vit5_maskrcnn_coco.py [--shrink] [--cfg-options k=v ...]

Prints parameters, FLOPs per image at the config's input size, the time and peak memory of
one real training step on one image on this device (CUDA if present), the schedule in
iterations and epochs, and the total batch the learning rate assumes. Weights are random (no
checkpoint needed) and images synthetic (no dataset needed). ``--shrink`` runs the same
recipe with a tiny backbone and heads: a smoke check of the config, not its cost.
"""
import argparse
import os.path as osp

from cli_options import add_cfg_options

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('--shrink', action='store_true',
                        help='tiny backbone and heads (smoke check; costs are not the config\'s)')
    parser.add_argument('--device', help='default: cuda when there is one, else cpu')
    parser.add_argument('--warmup', type=int, default=None,
                        help='untimed steps first (default: 1 on CUDA, 0 on CPU)')
    add_cfg_options(parser, 'model.backbone.arch=small')
    args = parser.parse_args()
    import torch  # after parsing: --help needs none of these

    from benchmarks.dry_run import dry_run, report
    from mmvit5.utils import load_config, shrink_model
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    cfg = load_config(args.config, args.cfg_options, check_data=False)
    if args.shrink:
        shrink_model(cfg.model)
    device = torch.device(args.device)
    warmup = args.warmup if args.warmup is not None else int(device.type == 'cuda')
    name = args.config + (' (shrunk)' if args.shrink else '')
    print(report(dry_run(cfg, device, warmup), name))


if __name__ == '__main__':
    main()

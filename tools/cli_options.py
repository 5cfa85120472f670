"""Command-line options the tools share, importable without torch or OpenMMLab.

Every tool builds its parser from the standard library alone and imports torch, mmengine,
mmdet, mmseg and mmvit5 inside ``main`` after parsing, so ``--help`` (and a mistyped flag)
answers at once instead of after seconds of imports (tests/test_tools_start.py checks it).
"""
import argparse


class DictOptions(argparse.Action):
    """mmengine's ``DictAction`` (``key=value`` overrides such as ``model.backbone.arch=small``),
    imported only when the option is given."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from mmengine.config import DictAction
        DictAction(self.option_strings, self.dest)(parser, namespace, values, option_string)


def add_cfg_options(parser: argparse.ArgumentParser, example: str) -> None:
    """``--cfg-options key=value ...``, mmdet's and mmseg's config overrides."""
    parser.add_argument('--cfg-options', nargs='+', action=DictOptions,
                        help=f'override config entries, e.g. {example}')


def add_runner_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options tools/train.py and tools/test.py share with mmdet's and mmseg's tools."""
    parser.add_argument('--work-dir', help='where logs (and checkpoints) go')
    parser.add_argument('--amp', action='store_true', help='mixed precision')
    add_cfg_options(parser, 'train_cfg.max_iters=100')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher (pytorch for torchrun)')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    return parser

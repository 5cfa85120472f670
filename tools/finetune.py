"""Fine-tune a shipped recipe on your own data, class names read from the files.

    # COCO-format instances (a json per split, image folders) -> ViT5 Mask R-CNN, Cascade
    # Mask R-CNN or instance Mask2Former (--config)
    python tools/finetune.py det DATA_ROOT [--train-ann annotations/instances_train2017.json]
        [--train-img train2017] [--val-ann annotations/instances_val2017.json]
        [--val-img val2017] [--config configs/vit5_maskrcnn_coco.py]
    # a folder of images and one of PNG masks, classes.txt -> ViT5 UperNet or Mask2Former
    python tools/finetune.py seg DATA_ROOT [--classes classes.txt] [--train-img img_dir/train]
        [--train-mask ann_dir/train] [--val-img img_dir/val] [--val-mask ann_dir/val]
        [--img-suffix .jpg] [--mask-suffix .png] [--reduce-zero-label]
        [--config configs/vit5_upernet_ade20k.py]

Both take tools/train.py's options (--work-dir, --amp, --resume, --auto-scale-lr,
--iters N, --cfg-options, --launcher); --iters fits the recipe's schedule to N iterations. Paths
are relative to DATA_ROOT. The run's full config lands in the work dir, ready for
tools/test.py. Guide: docs/en/user_guides/custom_dataset.md.
"""
import argparse
import os
import os.path as osp

from train import add_train_args, train

DEFAULT_CONFIGS = dict(det='configs/vit5_maskrcnn_coco.py', seg='configs/vit5_upernet_ade20k.py')
REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tasks = parser.add_subparsers(dest='task', required=True)
    det = tasks.add_parser('det', help='COCO-format instances -> Mask R-CNN, Cascade or '
                           'instance Mask2Former')
    seg = tasks.add_parser('seg', help='images + PNG masks -> UperNet or Mask2Former')
    for task, sub in (('det', det), ('seg', seg)):
        sub.add_argument('data_root', help='the dataset folder; paths below are relative to it')
        sub.add_argument('--config', default=osp.join(REPO, DEFAULT_CONFIGS[task]),
                         help=f'the recipe to fine-tune (default {DEFAULT_CONFIGS[task]})')
        add_train_args(sub)
    det.add_argument('--train-ann', default='annotations/instances_train2017.json')
    det.add_argument('--train-img', default='train2017')
    det.add_argument('--val-ann', default='annotations/instances_val2017.json')
    det.add_argument('--val-img', default='val2017')
    det.add_argument('--no-image-check', action='store_true',
                     help='skip checking that every image the jsons list is there, decodes '
                     'and loads at the size the json gives it (every image decoded once)')
    seg.add_argument('--classes', default='classes.txt',
                     help='class names, one a line, label 0 first')
    seg.add_argument('--train-img', default='img_dir/train')
    seg.add_argument('--train-mask', default='ann_dir/train')
    seg.add_argument('--val-img', default='img_dir/val')
    seg.add_argument('--val-mask', default='ann_dir/val')
    seg.add_argument('--img-suffix', default='.jpg')
    seg.add_argument('--mask-suffix', default='.png')
    seg.add_argument('--reduce-zero-label', action='store_true',
                     help='mask value 0 is unlabelled and value v is class v - 1 (ADE20K)')
    seg.add_argument('--no-mask-check', action='store_true',
                     help='skip checking that every image and mask decodes, every image loads '
                     'at its mask\'s size and every mask\'s values are labels')
    return parser.parse_args(argv)


def finetune_config(args):
    """The recipe on the data of ``args``; the user's --cfg-options apply last."""
    from mmvit5.utils import (
        amp_for_device,
        check_config,
        load_config,
        read_coco_splits,
        use_coco_data,
        use_seg_folder,
    )
    # the jsons need no config: their mistakes are named before the recipe is loaded
    jsons = read_coco_splits(args.data_root, args.train_ann, args.val_ann) \
        if args.task == 'det' else None
    work_dir = args.work_dir or osp.join(
        'work_dirs', f'{osp.splitext(osp.basename(args.config))[0]}_'
        f'{osp.basename(osp.normpath(args.data_root))}')
    # --cfg-options apply before the data too, so that the summary tells what the user's
    # filter_cfg will do
    cfg = load_config(args.config, args.cfg_options, work_dir, check_data=False,
                      max_iters=args.iters)
    if args.task == 'det':
        data = use_coco_data(cfg, args.data_root, args.train_ann, args.train_img,
                             args.val_ann, args.val_img, not args.no_image_check, jsons)
        source = osp.join(args.data_root, args.train_ann)
    else:
        data = use_seg_folder(cfg, args.data_root, args.classes, args.train_img,
                              args.train_mask, args.val_img, args.val_mask, args.img_suffix,
                              args.mask_suffix, args.reduce_zero_label, not args.no_mask_check)
        source = osp.join(args.data_root, args.classes)
    print(f'[finetune] {len(data.classes)} classes from {source}: {", ".join(data.classes)}')
    for line in data.summary:
        print(f'[finetune] {line}')
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
        check_config(cfg, args.config, check_data=False)
        amp_for_device(cfg)
    return cfg


def main():
    args = parse_args()
    try:
        cfg = finetune_config(args)
    except (OSError, ValueError) as e:  # the data or options (a file it may not read too)
        raise SystemExit(f'[finetune] {type(e).__name__}: {e}')
    train(cfg, args)
    from mmengine.dist import get_rank
    if get_rank():
        return
    # mmengine's Runner wrote the whole config into the work dir under the recipe's name
    saved = osp.join(cfg.work_dir, osp.basename(args.config))
    last = osp.join(cfg.work_dir, f'iter_{cfg.train_cfg.max_iters}.pth')
    test = osp.join(osp.dirname(osp.abspath(__file__)), 'test.py')
    print(f'[finetune] evaluate with: python {" ".join(map(from_here, (test, saved, last)))}')


def from_here(path: str) -> str:
    """``path`` as the user's shell reaches it: relative below the current folder, else
    absolute."""
    relative = osp.relpath(path)
    return osp.abspath(path) if relative.startswith(os.pardir) else relative


if __name__ == '__main__':
    main()

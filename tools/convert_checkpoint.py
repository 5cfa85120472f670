"""Turn a released ViT-5 file into an mmengine checkpoint (``state_dict`` + ``meta``).

    python tools/convert_checkpoint.py vit5_base_patch16_224.pth \
        checkpoints/vit5_base_mmengine.pth [--img-size 1024] [--keep-head] [--ema]

Keys become ``backbone.*`` (loadable by ``load_from`` in mmdet/mmseg/mmpretrain configs and by
``init_cfg=dict(type='Pretrained', ...)`` of ViT5); ``--keep-head`` adds the classifier as
mmpretrain's ``head.fc.*``. ``--img-size`` resizes ``pos_embed`` (bicubic, as the reference's
fine-tuning code) for a model whose ``img_size`` is that size. The output is written to a
temporary file and renamed, so an interrupted run never leaves a half-written checkpoint.
"""
import argparse
import os
import sys
import time


def convert(src: str, dst: str, img_size=None, keep_head=False, ema=False,
            patch_size=16) -> dict:
    import torch  # here, not at the top: --help needs no torch

    from mmvit5.checkpoint import extract_state_dict, read_checkpoint
    from mmvit5.models.backbones.vit5_weights import (
        check_vit5_state,
        describe_state,
        square_grid,
    )
    from mmvit5.models.layers.pos_embed import resize_pos_embed
    from mmvit5.utils.atomic_file import atomic_open

    def step(message):
        print(f'[convert] {message}', file=sys.stderr)

    step(f'reading {src}')
    state = extract_state_dict(read_checkpoint(src), 'model_ema' if ema else None)
    check_vit5_state(state, src)
    step(f'{len(state)} tensors, {describe_state(state)}')
    out = {}
    for key, value in state.items():
        if key.endswith(('rope.freqs', 'rope_reg.freqs')):
            continue  # deterministic; ViT5 recomputes them
        if key.startswith('head.'):
            if keep_head:
                out['head.fc.' + key[len('head.'):]] = value
            continue
        out['backbone.' + key] = value
    src_grid = square_grid(state['pos_embed'].shape[1], 'pos_embed')
    if img_size:
        dst_grid = (img_size // patch_size, img_size // patch_size)
        out['backbone.pos_embed'] = resize_pos_embed(state['pos_embed'], src_grid, dst_grid)
        step(f'resized pos_embed from {src_grid[0]}x{src_grid[1]} to {dst_grid[0]}x{dst_grid[1]}')
    meta = dict(source=os.path.abspath(src), converted_by='mmvit5 tools/convert_checkpoint.py',
                time=time.strftime('%Y-%m-%d %H:%M:%S'), ema=ema,
                img_size=img_size or src_grid[0] * patch_size)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with atomic_open(dst, 'wb') as f:
        torch.save(dict(state_dict=out, meta=meta), f)
    step(f'wrote {len(out)} tensors to {dst}')
    return meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='released ViT-5 .pth')
    parser.add_argument('dst', help='output mmengine checkpoint')
    parser.add_argument('--img-size', type=int, help='resize pos_embed for this img_size')
    parser.add_argument('--keep-head', action='store_true', help='keep the classifier')
    parser.add_argument('--ema', action='store_true', help='take model_ema, not model')
    args = parser.parse_args()
    if os.path.abspath(args.src) == os.path.abspath(args.dst):
        parser.error('dst must differ from src: the released file is never overwritten')
    convert(args.src, args.dst, args.img_size, args.keep_head, args.ema)


if __name__ == '__main__':
    main()

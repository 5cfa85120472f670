"""Convert a released ViT-5 file for mmengine's load_from or timm, as .pth or .safetensors.

    python tools/convert_checkpoint.py vit5_base_patch16_224.pth \
        checkpoints/vit5_base_mmengine.pth [--img-size 1024] [--keep-head] [--ema]
    python tools/convert_checkpoint.py vit5_base_patch16_224.pth \
        checkpoints/vit5_base_patch16_224.safetensors --layout timm --keep-head
    python tools/convert_checkpoint.py vit5_small_patch16_224.pth checkpoints/vit5-s-hf \
        --layout hf

The layout ``mmengine`` (default) writes an mmengine checkpoint (``state_dict`` + ``meta``)
whose keys are ``backbone.*`` (loadable by ``load_from`` in mmdet/mmseg/mmpretrain configs and
by ``init_cfg=dict(type='Pretrained', ...)`` of ViT5); ``--keep-head`` adds the classifier as
mmpretrain's ``head.fc.*``. The layout ``timm`` keeps the model's own keys (``head.*`` with
``--keep-head``): the state dict of ``timm.create_model('vit5_..._patch16_...')``, which timm's
``checkpoint_path=`` loads as well. A ``dst`` ending in ``.safetensors`` is written as
safetensors (tensors only, the meta as string metadata under ``mmvit5``), anything else with
``torch.save``. The layout ``hf`` writes a Hugging Face transformers folder, ``config.json``
and ``model.safetensors`` of :class:`mmvit5.hf.Vit5Backbone` (keys ``vit5.*``, no classifier),
which ``AutoBackbone.from_pretrained(dst)`` loads. ``--img-size`` resizes ``pos_embed``
(bicubic, as the reference's fine-tuning code) for a model whose ``img_size`` is that size.
The output is written to a temporary file and renamed, so an interrupted run never leaves a
half-written checkpoint.
"""
import argparse
import json
import os
import sys
import time

# where each layout puts the backbone and the classifier (transformers' backbone has none)
LAYOUTS = dict(mmengine=('backbone.', 'head.fc.'), timm=('', 'head.'), hf=('vit5.', None))


def convert(src: str, dst: str, img_size=None, keep_head=False, ema=False,
            patch_size=16, layout='mmengine') -> dict:
    import safetensors.torch  # here, not at the top: --help needs no torch
    import torch

    from mmvit5.checkpoint import extract_state_dict, is_safetensors, read_checkpoint
    from mmvit5.models.backbones.vit5_weights import (
        check_vit5_state,
        describe_state,
        square_grid,
    )
    from mmvit5.models.layers.pos_embed import resize_pos_embed
    from mmvit5.utils.atomic_file import atomic_open

    def step(message):
        print(f'[convert] {message}', file=sys.stderr)

    if layout == 'hf' and keep_head:
        raise ValueError('--keep-head does not apply to --layout hf: transformers\' backbone '
                         'has no classifier; drop --keep-head (or use --layout timm)')
    step(f'reading {src}')
    state = extract_state_dict(read_checkpoint(src), 'model_ema' if ema else None)
    check_vit5_state(state, src)
    step(f'{len(state)} tensors, {describe_state(state)}')
    backbone, head = LAYOUTS[layout]
    out = {}
    for key, value in state.items():
        if key.endswith(('rope.freqs', 'rope_reg.freqs')):
            continue  # deterministic; ViT5 recomputes them
        if key.startswith('head.'):
            if keep_head:
                out[head + key[len('head.'):]] = value
            continue
        out[backbone + key] = value
    src_grid = square_grid(state['pos_embed'].shape[1], 'pos_embed')
    if img_size:
        dst_grid = (img_size // patch_size, img_size // patch_size)
        out[backbone + 'pos_embed'] = resize_pos_embed(state['pos_embed'], src_grid, dst_grid)
        step(f'resized pos_embed from {src_grid[0]}x{src_grid[1]} to {dst_grid[0]}x{dst_grid[1]}')
    meta = dict(source=os.path.abspath(src), converted_by='mmvit5 tools/convert_checkpoint.py',
                time=time.strftime('%Y-%m-%d %H:%M:%S'), ema=ema, layout=layout,
                img_size=img_size or src_grid[0] * patch_size)
    if layout == 'hf':
        from mmvit5.hf import released_config
        write_hf_folder(out, dst, meta, released_config(state, patch_size,
                                                        image_size=meta['img_size']))
        step(f'wrote {len(out)} tensors and config.json to {dst}')
        return meta
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with atomic_open(dst, 'wb') as f:
        if is_safetensors(dst):
            f.write(safetensors.torch.save({k: v.contiguous() for k, v in out.items()},
                                           metadata=dict(format='pt', mmvit5=json.dumps(meta))))
        else:
            torch.save(dict(state_dict=out, meta=meta), f)
    step(f'wrote {len(out)} tensors to {dst}')
    return meta


def write_hf_folder(state: dict, dst: str, meta: dict, config) -> None:
    """``dst/config.json`` (``config``, a :class:`mmvit5.hf.Vit5BackboneConfig`) and
    ``dst/model.safetensors`` (``state``), each written to a temporary file and renamed."""
    import safetensors.torch

    from mmvit5.utils.atomic_file import atomic_open

    if os.path.isfile(dst):
        raise ValueError(f'--layout hf writes a folder, but {dst} is a file; give a folder path')
    config.architectures = ['Vit5Backbone']  # as save_pretrained writes it
    os.makedirs(dst, exist_ok=True)
    with atomic_open(os.path.join(dst, 'model.safetensors'), 'wb') as f:
        f.write(safetensors.torch.save({k: v.contiguous() for k, v in state.items()},
                                       metadata=dict(format='pt', mmvit5=json.dumps(meta))))
    with atomic_open(os.path.join(dst, 'config.json'), 'w') as f:
        f.write(config.to_json_string())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='released ViT-5 file (.pth or .safetensors)')
    parser.add_argument('dst', help='output checkpoint: .safetensors, else a torch.save file')
    parser.add_argument('--layout', choices=sorted(LAYOUTS), default='mmengine',
                        help="keys for mmengine's load_from (backbone.*, default) or timm's "
                        'create_model (the model\'s own)')
    parser.add_argument('--img-size', type=int, help='resize pos_embed for this img_size')
    parser.add_argument('--keep-head', action='store_true', help='keep the classifier')
    parser.add_argument('--ema', action='store_true', help='take model_ema, not model')
    args = parser.parse_args()
    if os.path.abspath(args.src) == os.path.abspath(args.dst):
        parser.error('dst must differ from src: the released file is never overwritten')
    try:
        convert(args.src, args.dst, args.img_size, args.keep_head, args.ema, layout=args.layout)
    except ValueError as e:  # a bad combination of options or paths: one line, not a traceback
        parser.error(str(e))


if __name__ == '__main__':
    main()

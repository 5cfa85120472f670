"""Per-patch feature-norm maps of ViT-5's last layer, with and without its register tokens.

    python tools/visualize_tokens.py IMAGE --checkpoint \
        https://huggingface.co/FengWang3211/ViT-5/resolve/main/vit5_base_patch16_224.pth \
        [--arch base] [--img-size 224] [--size 448] --out tokens.png

(a URL is downloaded once into the torch hub cache; a local path works too).

Registers exist to absorb the high-norm "artefact" patch tokens that plain ViTs grow in
background regions (Darcet et al., 2024). The figure shows the image, the norm of every final
patch token with the registers in the sequence, the same weights run without registers, and
the norms of the class and register tokens. Without ``--checkpoint`` the weights are random
(useful only to check the tool).
"""
import argparse
import ast
import sys

MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)


def load_image(path: str, size: int) -> tuple:
    import cv2
    import numpy as np
    import torch
    image = cv2.imread(path)
    if image is None:
        raise FileNotFoundError(f'cannot read image {path!r}')
    image = cv2.cvtColor(cv2.resize(image, (size, size)), cv2.COLOR_BGR2RGB)
    tensor = torch.from_numpy((image - np.array(MEAN)) / np.array(STD))
    tensor = tensor.permute(2, 0, 1)[None].float()
    return image, tensor


def token_norms(model, x, with_registers: bool) -> dict:
    """Norms of the patch tokens (a grid) and of the class and register tokens of ``model``
    (a ViT5) on the image tensor ``x``."""
    import torch
    with torch.no_grad():
        out = model.forward_tokens(x, with_registers=with_registers)
    rows, cols = out['grid']
    return dict(patch=out['patch_tokens'][0].norm(dim=-1).reshape(rows, cols).numpy(),
                prefix=torch.cat((out['cls_token'], out['reg_tokens'][0])).norm(dim=-1).numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('image')
    parser.add_argument('--checkpoint', help='released or mmengine ViT-5 checkpoint (path or URL)')
    parser.add_argument('--arch', default='base',
                        help="preset name, or a dict such as \"{'embed_dim': 64, 'depth': 2, "
                        "'num_heads': 2}\"")
    parser.add_argument('--img-size', type=int, default=224, help='pretraining size')
    parser.add_argument('--size', type=int, default=448, help='input side for the maps')
    parser.add_argument('--out', default='tokens.png')
    args = parser.parse_args()
    import matplotlib  # after parsing: --help needs none of these
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from mmvit5.models import ViT5
    init_cfg = dict(type='Pretrained', checkpoint=args.checkpoint) if args.checkpoint else None
    arch = ast.literal_eval(args.arch) if args.arch.startswith('{') else args.arch
    model = ViT5(arch=arch, img_size=args.img_size, init_cfg=init_cfg)
    print('[visualize_tokens] loading weights' if init_cfg else
          '[visualize_tokens] no --checkpoint: random weights', file=sys.stderr)
    model.init_weights()
    model.eval()
    image, x = load_image(args.image, args.size)
    with_regs, without = token_norms(model, x, True), token_norms(model, x, False)
    vmax = max(with_regs['patch'].max(), without['patch'].max())
    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    axes[0].imshow(image)
    axes[0].set_title('input')
    for ax, norms, title in ((axes[1], with_regs, f'with {model.num_registers} registers'),
                             (axes[2], without, 'same weights, no registers')):
        shown = ax.imshow(norms['patch'], cmap='inferno', vmin=0, vmax=vmax)
        ax.set_title(f'patch-token norm, {title}\nmax {norms["patch"].max():.1f}')
    fig.colorbar(shown, ax=axes[1:3], fraction=0.03)
    labels = ['cls'] + [f'reg {i}' for i in range(model.num_registers)]
    axes[3].bar(labels, with_regs['prefix'], color='tab:blue')
    axes[3].set_title('class / register token norms')
    for ax in axes[:3]:
        ax.axis('off')
    fig.savefig(args.out, dpi=100, bbox_inches='tight')
    print(f'[visualize_tokens] wrote {args.out}', file=sys.stderr)


if __name__ == '__main__':
    main()

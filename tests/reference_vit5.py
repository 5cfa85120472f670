"""ViT-5 written out from ``shared/vit5-reference.md``, independent of mmvit5's modules.

It is the yardstick of the parity tests: explicit float math over a released-layout state
dict, and a builder of released-layout checkpoints from random weights (LayerScale gammas and
norm weights far from their init, so every block matters).
"""
import argparse
import math

import torch
import torch.nn.functional as F

SIZES = dict(small=(384, 12, 6), base=(768, 12, 12), large=(1024, 24, 16))


def released_state_dict(embed_dim, depth, num_heads, img_size=224, patch=16, num_registers=4,
                        num_classes=1000, seed=0):
    """Random weights under the released key names (spec, "Checkpoint layout")."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.02):
        return torch.randn(*shape, generator=g) * scale

    def far_from_one(n):  # norm weights / gammas far from 1 and from 1e-4
        return 0.5 + torch.rand(n, generator=g)

    head_dim = embed_dim // num_heads
    grid = img_size // patch
    sd = {
        'cls_token': rnd(1, 1, embed_dim, scale=1.0),
        'reg_token': rnd(1, num_registers, embed_dim, scale=1.0),
        'pos_embed': rnd(1, grid * grid, embed_dim, scale=0.5),
        'patch_embed.proj.weight': rnd(embed_dim, 3, patch, patch, scale=0.05),
        'patch_embed.proj.bias': rnd(embed_dim, scale=0.1),
    }
    for i in range(depth):
        p = f'blocks.{i}.'
        sd.update({
            p + 'gamma_1': far_from_one(embed_dim),
            p + 'gamma_2': far_from_one(embed_dim),
            p + 'norm1.weight': far_from_one(embed_dim),
            p + 'norm2.weight': far_from_one(embed_dim),
            p + 'attn.qkv.weight': rnd(3 * embed_dim, embed_dim, scale=embed_dim**-0.5),
            p + 'attn.proj.weight': rnd(embed_dim, embed_dim, scale=embed_dim**-0.5),
            p + 'attn.proj.bias': rnd(embed_dim, scale=0.1),
            p + 'attn.q_norm.weight': far_from_one(head_dim),
            p + 'attn.k_norm.weight': far_from_one(head_dim),
            p + 'attn.rope.freqs': rope_freqs(head_dim, 10000.0),
            p + 'attn.rope_reg.freqs': rope_freqs(head_dim, 100.0),
            p + 'mlp.fc1.weight': rnd(4 * embed_dim, embed_dim, scale=embed_dim**-0.5),
            p + 'mlp.fc1.bias': rnd(4 * embed_dim, scale=0.1),
            p + 'mlp.fc2.weight': rnd(embed_dim, 4 * embed_dim, scale=(4 * embed_dim)**-0.5),
            p + 'mlp.fc2.bias': rnd(embed_dim, scale=0.1),
        })
    sd['norm.weight'] = far_from_one(embed_dim)
    sd['head.weight'] = rnd(num_classes, embed_dim)
    sd['head.bias'] = rnd(num_classes)
    return sd


def released_checkpoint(state_dict, with_ema=True):
    """The whole DeiT-style file: model, model_ema, optimizer, epoch, args."""
    ckpt = dict(model=state_dict, optimizer={'state': {}, 'param_groups': []}, epoch=299,
                args=argparse.Namespace(model='vit5_base', input_size=224, lr=1e-3))
    if with_ema:
        # EMA averages parameters; the RoPE buffers are copied as they are
        ckpt['model_ema'] = {k: v if k.endswith('freqs') else v + 1e-3
                             for k, v in state_dict.items()}
    return ckpt


def rope_freqs(head_dim, theta):
    d = head_dim // 2
    return torch.tensor([theta**(-2 * j / d) for j in range(d // 2)], dtype=torch.float32)


def rms_norm(x, weight, eps=1e-6):
    xf = x.float()
    return weight * (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)


def axis_angles(n, n_pt, freqs, mode):
    t = [i / n * n_pt if mode == 'interpolate' else float(i) for i in range(n)]
    a = torch.tensor(t, dtype=torch.float64)[:, None] * freqs.double()[None]
    return torch.stack([a, a], dim=-1).flatten(1)  # a0, a0, a1, a1, ...


def grid_angles(rows, cols, n_pt, freqs, mode):
    ar = axis_angles(rows, n_pt[0], freqs, mode)
    ac = axis_angles(cols, n_pt[1], freqs, mode)
    out = []
    for r in range(rows):
        for c in range(cols):
            out.append(torch.cat([ar[r], ac[c]]))  # row channels first, then column
    return torch.stack(out)


def rotate(x, angles):
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rot = torch.empty_like(x)
    rot[..., 0::2] = -x[..., 1::2]
    rot[..., 1::2] = x[..., 0::2]
    return x * cos + rot * sin


def forward(sd, images, num_heads, pt_grid, mode='interpolate', patch=16):
    """Final-normed tokens (B, 1 + N + R, C) of the reference, as float32 math."""
    B = images.shape[0]
    x = F.conv2d(images, sd['patch_embed.proj.weight'], sd['patch_embed.proj.bias'],
                 stride=patch)
    rows, cols = x.shape[2:]
    x = x.flatten(2).transpose(1, 2)
    C = x.shape[-1]
    pos = sd['pos_embed']
    src = int(math.isqrt(pos.shape[1]))
    if (rows, cols) != (src, src):
        pos = pos.reshape(1, src, src, C).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(rows, cols), mode='bicubic', align_corners=False)
        pos = pos.permute(0, 2, 3, 1).flatten(1, 2)
    x = x + pos
    R = sd['reg_token'].shape[1]
    x = torch.cat([sd['cls_token'].expand(B, -1, -1), x, sd['reg_token'].expand(B, -1, -1)], 1)
    N = rows * cols
    hd = C // num_heads
    depth = len({k.split('.')[1] for k in sd if k.startswith('blocks.')})
    side = int(math.isqrt(R))
    for i in range(depth):
        p = f'blocks.{i}.'
        patch_ang = grid_angles(rows, cols, pt_grid, sd[p + 'attn.rope.freqs'], mode)
        reg_ang = grid_angles(side, side, (side, side), sd[p + 'attn.rope_reg.freqs'], mode)
        h = rms_norm(x, sd[p + 'norm1.weight'])
        qkv = (h @ sd[p + 'attn.qkv.weight'].T).reshape(B, -1, 3, num_heads, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, T, H, hd)
        q = rms_norm(q, sd[p + 'attn.q_norm.weight'])
        k = rms_norm(k, sd[p + 'attn.k_norm.weight'])
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, hd)
        for t in (q, k):
            t[:, :, 1:1 + N] = rotate(t[:, :, 1:1 + N], patch_ang)
            t[:, :, 1 + N:] = rotate(t[:, :, 1 + N:], reg_ang)
        attn = (q @ k.transpose(-2, -1)) * hd**-0.5
        out = attn.softmax(-1) @ v.transpose(1, 2)
        out = out.transpose(1, 2).reshape(B, -1, C)
        x = x + sd[p + 'gamma_1'] * (out @ sd[p + 'attn.proj.weight'].T + sd[p + 'attn.proj.bias'])
        h = rms_norm(x, sd[p + 'norm2.weight'])
        h = F.gelu(h @ sd[p + 'mlp.fc1.weight'].T + sd[p + 'mlp.fc1.bias'])
        x = x + sd[p + 'gamma_2'] * (h @ sd[p + 'mlp.fc2.weight'].T + sd[p + 'mlp.fc2.bias'])
    return rms_norm(x, sd['norm.weight'])


def logits(sd, images, num_heads, pt_grid, mode='interpolate'):
    tokens = forward(sd, images, num_heads, pt_grid, mode)
    return tokens[:, 0] @ sd['head.weight'].T + sd['head.bias']

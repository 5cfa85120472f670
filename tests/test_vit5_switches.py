"""ViT5's ablation switches: the parts they remove, the fast paths under each, and loading a
released checkpoint into an ablated model (what fits loads, the rest is logged)."""
import logging
from dataclasses import fields

import pytest
import torch
from mmengine.logging import MMLogger

import reference_vit5 as ref
from mmvit5.checkpoint import CheckpointError
from mmvit5.models import ViT5, ViT5Config
from mmvit5.models.layers.rope import RotaryEmbedding2D, register_grid, sequence_angles
from test_vit5 import ARCH, DEPTH, DIM, HEADS, IMG, build, rel_err, released  # noqa: F401

SWITCHES = {
    'no-abs-pos': dict(use_abs_pos=False), 'no-rope': dict(use_rope=False),
    'reg0': dict(num_registers=0), 'reg5': dict(num_registers=5),
    'no-qk-norm': dict(qk_norm=False), 'no-layer-scale': dict(layer_scale_init_value=None),
    'layer-scale-1e-6': dict(layer_scale_init_value=1e-6), 'ln': dict(norm='ln'),
    'qkv-bias': dict(qkv_bias=True),
}
RELEASED_KEYS = set(ViT5(arch=ARCH, img_size=IMG).state_dict())


def block_keys(*names):
    return {f'blocks.{i}.{name}' for i in range(DEPTH) for name in names}


# how each switch changes the state dict: (keys removed, keys added)
KEY_CHANGES = {
    'no-abs-pos': ({'pos_embed'}, set()), 'no-rope': (set(), set()),
    'reg0': ({'reg_token'}, set()), 'reg5': (set(), set()),
    'no-qk-norm': (block_keys('attn.q_norm.weight', 'attn.k_norm.weight'), set()),
    'no-layer-scale': (block_keys('gamma_1', 'gamma_2'), set()),
    'layer-scale-1e-6': (set(), set()),
    'ln': (set(), block_keys('norm1.bias', 'norm2.bias', 'attn.q_norm.bias',
                             'attn.k_norm.bias') | {'norm.bias'}),
    'qkv-bias': (set(), block_keys('attn.qkv.bias')),
}


@pytest.fixture
def warnings_logged():
    """The messages of the warnings mmengine's current logger emits during the test."""
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)


@pytest.mark.parametrize('name', sorted(SWITCHES))
def test_switch_removes_or_adds_exactly_its_part(name):
    model = ViT5(arch=ARCH, img_size=IMG, **SWITCHES[name])
    removed, added = KEY_CHANGES[name]
    assert set(model.state_dict()) == (RELEASED_KEYS - removed) | added
    types = {type(m).__name__ for m in model.modules()}
    assert ('LayerNorm' in types) == (name == 'ln') and ('RMSNorm' in types) != (name == 'ln')
    assert (model.rope is None) == (name == 'no-rope')
    assert (model.rope_reg is None) == (name in ('no-rope', 'reg0'))


# every part off at once (no RoPE, no registers, ...), and non-square registers with RoPE
FAST_PATH_CASES = {
    'all-off': dict(use_abs_pos=False, use_rope=False, num_registers=0, qk_norm=False,
                    layer_scale_init_value=None, norm='ln', qkv_bias=True),
    'reg5': dict(num_registers=5),
}


@pytest.mark.parametrize('name', sorted(FAST_PATH_CASES))
def test_fast_paths_agree_under_the_switches(name):
    """Fused and explicit attention, one window covering the grid and global attention, and
    activation checkpointing give the plain model's outputs (and gradients)."""
    torch.manual_seed(0)
    plain = build(**FAST_PATH_CASES[name], out_type='raw')
    x = torch.randn(2, 3, 64, 80)  # a 4x5 grid
    with torch.no_grad():
        expected = plain(x)[0]
    assert expected.shape == (2, 1 + 20 + plain.num_registers, DIM)
    for variant in (dict(attn_impl='math'), dict(window_size=5, global_attn_indices=[]),
                    dict(with_cp=True)):
        other = ViT5(arch=ARCH, img_size=IMG, **FAST_PATH_CASES[name], out_type='raw',
                     **variant)
        other.load_state_dict(plain.state_dict())
        other.train(variant.get('with_cp', False)).requires_grad_(True)
        out = other(x)[0]
        assert rel_err(out, expected) < 1e-5, variant
    plain.train()
    plain(x)[0].square().mean().backward()
    out.square().mean().backward()
    for (key, p), q in zip(plain.named_parameters(), other.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5, msg=key)


def test_without_positions_the_model_is_permutation_equivariant():
    """With both position sources off, shuffling the patches shuffles the output; each
    source alone still breaks that."""
    x = torch.randn(1, 3, IMG, IMG)
    patches = x.unfold(2, 16, 16).unfold(3, 16, 16)  # (1, 3, 4, 4, 16, 16)
    order = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    shuffled = patches.reshape(1, 3, 16, 16, 16)[:, :, order].reshape(1, 3, 4, 4, 16, 16)
    shuffled = shuffled.permute(0, 1, 2, 4, 3, 5).reshape(1, 3, IMG, IMG)
    for kwargs, equivariant in ((dict(use_abs_pos=False, use_rope=False), True),
                                (dict(use_abs_pos=False), False), (dict(use_rope=False), False)):
        torch.manual_seed(0)
        model = build(**kwargs, layer_scale_init_value=1.0)  # 1e-4 would hide the attention
        with torch.no_grad():
            out, out_shuffled = model(x)[0].flatten(2), model(shuffled)[0].flatten(2)
        assert torch.allclose(out[..., order], out_shuffled, atol=1e-5) == equivariant, kwargs


def test_register_rope_rule_for_any_count():
    assert [register_grid(n) for n in (0, 1, 2, 3, 4, 5, 6, 8, 9, 16)] == [
        (0, 0), (1, 1), (1, 2), (2, 2), (2, 2), (2, 3), (2, 3), (3, 3), (3, 3), (4, 4)]
    patch, reg = RotaryEmbedding2D(16, 10000.0, 4), RotaryEmbedding2D(16, 100.0, 2)
    grid_2x3 = reg.angles(2, 3, 'extrapolate')
    five = sequence_angles(patch, reg, (4, 4), 5, 'interpolate')
    assert five.shape == (1 + 16 + 5, 8)
    assert torch.equal(five[17:], grid_2x3[:5])  # row by row, last cell of the 2x3 empty
    # row angles come first: register 3 sits at row 1, column 0; register 2 at row 0, column 2
    assert torch.equal(five[17 + 3, :4], reg.angles(2, 1, 'extrapolate')[1, :4])
    assert torch.equal(five[17 + 2, 4:], reg.angles(1, 3, 'extrapolate')[2, 4:])
    four = sequence_angles(patch, reg, (4, 4), 4, 'interpolate')
    assert torch.equal(four[17:], reg.angles(2, 2, 'extrapolate'))  # the released 2x2
    assert sequence_angles(patch, None, (4, 4), 0, 'interpolate').shape == (17, 8)
    with pytest.raises(ValueError, match='num_registers must be >= 0, got -1'):
        register_grid(-1)


# switch -> what the warnings must say when a released checkpoint is loaded into it
LOAD_NOTES = {
    'no-abs-pos': ['1 tensors dropped (use_abs_pos=False): pos_embed'],
    'no-rope': ['6 tensors dropped (use_rope=False): blocks.{0-2}.attn.rope.freqs, '
                'blocks.{0-2}.attn.rope_reg.freqs'],
    'reg0': ['4 tensors dropped (num_registers=0): blocks.{0-2}.attn.rope_reg.freqs, '
             'reg_token'],
    'reg5': ['1 tensors left at init (checkpoint (1, 4, 64)) (num_registers=5): reg_token'],
    'no-qk-norm': ['6 tensors dropped (qk_norm=False): blocks.{0-2}.attn.q_norm.weight, '
                   'blocks.{0-2}.attn.k_norm.weight'],
    'no-layer-scale': ['6 tensors folded into attn.proj / mlp.fc2, the same function '
                       '(layer_scale_init_value=None): blocks.{0-2}.gamma_1, '
                       'blocks.{0-2}.gamma_2'],
    'layer-scale-1e-6': ['6 tensors loaded over the init (layer_scale_init_value=1e-06): '
                         'blocks.{0-2}.gamma_1, blocks.{0-2}.gamma_2'],
    'ln': ["13 tensors left at init (norm='ln'): blocks.{0-2}.norm1.bias, "
           'blocks.{0-2}.attn.q_norm.bias, blocks.{0-2}.attn.k_norm.bias, '
           'blocks.{0-2}.norm2.bias, norm.bias'],
    'qkv-bias': ['3 tensors left at init (qkv_bias=True): blocks.{0-2}.attn.qkv.bias'],
}


@pytest.mark.parametrize('name', sorted(SWITCHES))
def test_released_checkpoint_loads_what_fits_and_says_what_not(released, warnings_logged,
                                                               name):
    sd, path = released
    torch.manual_seed(0)
    model = build(path, **SWITCHES[name])
    notes = [m.split(': ', 2)[2] for m in warnings_logged if m.startswith('ViT5: ')]
    assert notes == LOAD_NOTES[name]
    own = model.state_dict()
    folded = name == 'no-layer-scale'
    for key, value in own.items():
        if key in sd and sd[key].shape == value.shape and not (
                folded and key.endswith(('proj.weight', 'proj.bias', 'fc2.weight', 'fc2.bias'))):
            assert torch.equal(value, sd[key]), key
    for key in KEY_CHANGES[name][1]:  # biases the released model lacks start at zero
        assert torch.all(own[key] == 0), key


@pytest.mark.parametrize('name, same_as', [('no-layer-scale', {}),
                                           ('reg0', dict(with_registers=False))])
def test_loaded_ablation_keeps_the_released_function(released, name, same_as):
    """LayerScale folded into the weights, and registers dropped, compute what the released
    model computes (without registers for the latter)."""
    _, path = released
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        ablated = build(path, **SWITCHES[name]).forward_tokens(x)['patch_tokens']
        released_out = build(path).forward_tokens(x, **same_as)['patch_tokens']
    assert rel_err(ablated, released_out) < 1e-5


def test_differences_no_switch_explains_still_fail(released, tmp_path):
    sd, path = released
    with pytest.raises(CheckpointError, match=r'(?s)nothing in .* fits.*cls_token'):
        build(path, arch=dict(embed_dim=128, depth=DEPTH, num_heads=HEADS), qk_norm=False)
    with pytest.raises(CheckpointError, match='unexpected keys.*blocks.2'):
        build(path, arch=dict(embed_dim=DIM, depth=2, num_heads=HEADS), use_abs_pos=False)
    broken = {k: v for k, v in sd.items() if k != 'blocks.1.norm1.weight'}
    torch.save(ref.released_checkpoint(broken), tmp_path / 'broken.pth')
    with pytest.raises(CheckpointError,
                       match=r"(?s)norm='ln'.*missing keys.*blocks.1.norm1.weight"):
        build(str(tmp_path / 'broken.pth'), norm='ln')


def test_checkpoint_of_an_ablated_model_loads_back(tmp_path):
    kwargs = dict(use_abs_pos=False, qk_norm=False, num_registers=0, norm='ln',
                  layer_scale_init_value=None, qkv_bias=True)
    torch.manual_seed(0)
    trained = build(**kwargs)
    torch.save({'state_dict': trained.state_dict()}, tmp_path / 'ablated.pth')
    loaded = build(str(tmp_path / 'ablated.pth'), **kwargs)
    for key, value in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


# the windowed variants beside the ablations: windows with the default, explicit, no and every
# global block; a pyramid's several outputs, negative indices; a non-square pretraining size
VARIANTS = {**SWITCHES, 'windows': dict(window_size=2), 'windows-globals': dict(
    window_size=2, global_attn_indices=(-1, 0)), 'windows-no-global': dict(
    window_size=2, global_attn_indices=()), 'windows-all-global': dict(
    window_size=2, global_attn_indices=tuple(range(DEPTH))),
    'outputs': dict(out_indices=(-1, 1), img_size=(IMG, IMG + 16))}


@pytest.mark.parametrize('name', sorted(VARIANTS))
def test_the_config_is_the_models_state(name):
    """Every model attribute named as a config field (but a layer) has the field's value,
    resolved (a size pair, non-negative indices, the global blocks), also after timm's pruning;
    the blocks are built as the config says."""
    model = ViT5(arch=ARCH, **{'img_size': IMG, **VARIANTS[name]})
    for pruned in (False, True):
        cfg = model.config
        # but `norm`, the final norm layer, named by the released checkpoint's keys
        shared = [f.name for f in fields(cfg) if hasattr(model, f.name) and f.name not in
                  model._modules]
        assert {'img_size', 'out_indices', 'window_size', 'global_attn_indices',
                'num_registers', 'out_type'} <= set(shared)
        assert {n: getattr(model, n) for n in shared} == {n: getattr(cfg, n) for n in shared}
        assert len(cfg.img_size) == 2 and all(0 <= i < model.depth for i in cfg.out_indices)
        assert model.depth == cfg.arch_settings['depth'] == len(model.blocks)
        windowed = [i for i, block in enumerate(model.blocks) if block.attn.window_size]
        assert windowed == [i for i in range(model.depth) if i not in cfg.global_attn_indices]
        assert {block.attn.window_size for block in model.blocks} - {0} <= {cfg.window_size}
        assert (cfg.window_size == 0) == (not windowed)
        # resolved values resolve to themselves: a config made from them is the same config
        assert ViT5Config(**{f.name: getattr(cfg, f.name) for f in fields(cfg)}) == cfg
        if not pruned:
            assert model.prune_intermediate_layers([1]) == [1]
    assert model.depth == 2 and model.config.out_indices == (1, )


def test_a_model_attribute_is_set_through_its_checked_config():
    model = ViT5(arch=ARCH, img_size=IMG, with_cp=True)
    model.out_indices = [-1]
    assert model.out_indices == model.config.out_indices == (DEPTH - 1, )
    with pytest.raises(ValueError, match='out_type must be one of'):
        model.out_type = 'tokens'
    model.set_grad_checkpointing(False)  # timm's name for with_cp
    assert not model.config.with_cp and not model.grad_checkpointing

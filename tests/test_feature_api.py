"""timm's feature API on ViT5: ``forward_intermediates`` and ``feature_info``, checked against
``forward`` with ``out_indices`` and against timm's own VisionTransformer conventions."""
import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from mmvit5.models import ViT5

ARCH = dict(embed_dim=32, depth=4, num_heads=2)


def vit5(**kwargs) -> ViT5:
    torch.manual_seed(0)
    model = ViT5(arch=ARCH, img_size=64, **kwargs)
    model.init_weights()
    # LayerScale 1e-4 would make every block's output nearly its input: widen the contrast
    for name, param in model.named_parameters():
        if name.endswith(('gamma_1', 'gamma_2')):
            param.data.fill_(0.5)
    return model.eval()


@pytest.fixture(scope='module')
def model():
    return vit5()


@pytest.fixture(scope='module')
def images():
    torch.manual_seed(1)
    return torch.randn(2, 3, 48, 80)  # a 3x5 grid: rows and columns cannot be swapped unseen


def test_intermediates_equal_forward_with_out_indices(images):
    """Blocks before the last are raw; the last block is compared with norm=True, as forward
    applies the final norm there."""
    reference = vit5(out_indices=(0, 1, 2, 3))
    with torch.no_grad():
        expected = reference(images)
        raw = reference.forward_intermediates(images, intermediates_only=True)
        normed = reference.forward_intermediates(images, norm=True, intermediates_only=True)
    assert len(raw) == 4 and [tuple(f.shape) for f in raw] == [(2, 32, 3, 5)] * 4
    for got, want in zip(raw[:3], expected[:3]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(normed[3], expected[3], rtol=0, atol=0)
    assert not torch.allclose(raw[3], expected[3])  # the norm is not applied unless asked


def test_final_output_and_nlc_tokens(model, images):
    with torch.no_grad():
        final, maps = model.forward_intermediates(images, indices=[1, 3])
        _, tokens = model.forward_intermediates(images, indices=[1, 3], output_fmt='NLC')
        features = model.forward_tokens(images)
    # the final output is every token ([cls, patches, registers]) after the final norm
    assert final.shape == (2, 1 + 15 + 4, 32)
    torch.testing.assert_close(final[:, 0], features['cls_token'])
    torch.testing.assert_close(final[:, 1:16], features['patch_tokens'])
    for fmap, nlc in zip(maps, tokens):
        assert nlc.shape == (2, 15, 32)  # class token and registers stripped
        torch.testing.assert_close(fmap, nlc.transpose(1, 2).reshape(2, 32, 3, 5))


@pytest.mark.parametrize('indices, blocks', [
    (None, [0, 1, 2, 3]),  # every block
    (2, [2, 3]),  # an int: the last n blocks
    ([-1, 0], [0, 3]),  # a sequence: those blocks, negative from the end, in block order
    ((1, 1), [1]),
])
def test_indices_follow_timm(model, images, indices, blocks):
    with torch.no_grad():
        every = model.forward_intermediates(images, intermediates_only=True)
        got = model.forward_intermediates(images, indices=indices, intermediates_only=True)
    assert len(got) == len(blocks)
    for feature, block in zip(got, blocks):
        torch.testing.assert_close(feature, every[block], rtol=0, atol=0)
    # the same selection and order as timm's ViT of the same depth
    vit = VisionTransformer(img_size=(48, 80), patch_size=16, embed_dim=32, depth=4,
                            num_heads=2, num_classes=0).eval()
    with torch.no_grad():
        timm_blocks = vit.forward_intermediates(images, indices=indices,
                                                intermediates_only=True)
    assert [tuple(f.shape) for f in timm_blocks] == [tuple(f.shape) for f in got]


def test_feature_info_describes_the_intermediates(model, images):
    vit = VisionTransformer(img_size=64, patch_size=16, embed_dim=32, depth=4, num_heads=2)
    assert model.feature_info == vit.feature_info
    with torch.no_grad():
        maps = model.forward_intermediates(images, intermediates_only=True)
    for info, fmap in zip(model.feature_info, maps):
        assert fmap.shape[1] == info['num_chs']
        assert images.shape[-1] // fmap.shape[-1] == info['reduction']
        assert model.get_submodule(info['module']) is model.blocks[int(info['module'][7:])]


def test_intermediates_only_runs_no_later_block(images):
    model = vit5()
    ran = []
    for i, block in enumerate(model.blocks):
        block.register_forward_hook(lambda *_, i=i: ran.append(i))
    with torch.no_grad():
        model.forward_intermediates(images, indices=[1], intermediates_only=True)
        assert ran == [0, 1]
        ran.clear()
        model.forward_intermediates(images, indices=[1])
    assert ran == [0, 1, 2, 3]  # the final output needs every block


@pytest.mark.parametrize('kwargs, message', [
    (dict(indices=5), r'indices=5 asks for the last 5 blocks; an int must be in 1\.\.4'),
    (dict(indices=0), r'an int must be in 1\.\.4'),
    (dict(indices=[4]), r'indices entry 4 is out of range for 4 blocks'),
    (dict(output_fmt='NHWC'), r"output_fmt must be 'NCHW' or 'NLC', got 'NHWC'"),
])
def test_bad_arguments_name_the_value(model, images, kwargs, message):
    with pytest.raises(ValueError, match=message):
        model.forward_intermediates(images, **kwargs)

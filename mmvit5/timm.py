"""ViT-5 in timm's model registry: ``timm.create_model('vit5_base_patch16_224', pretrained=True)``.

A registration, not a second model: each entry builds :class:`~mmvit5.models.ViT5`, the
backbone of the mmdet and mmseg configs, with ``out_type='head'`` (timm's classifier API,
:class:`~mmvit5.models.backbones.vit5_timm_api.ViT5TimmApi`). ``import mmvit5`` imports this
module as soon as timm is imported (:func:`mmvit5.utils.after_import.import_after`), so timm
stays optional.

Pretrained weights are the released files (``{'model': state_dict, ...}``) on the Hugging Face
hub, downloaded and cached as timm does (``hf_hub_download``: ``HF_HOME``, ``HF_HUB_OFFLINE``),
or from ``url`` into the torch hub cache without ``huggingface_hub``. They are read by
:meth:`ViT5.load_pretrained <mmvit5.models.ViT5.load_pretrained>` (timm's ``custom_load``): the
``model`` entry, with ``weights_only=True``, ``.pth`` or ``.safetensors``, through
:func:`~mmvit5.models.backbones.vit5_weights.checkpoint_filter_fn`, as the backbones read them.
``pretrained_cfg_overlay=dict(file=PATH)`` loads a local file the same way.
"""
from typing import Any, Dict, Optional

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from .models import ViT5
from .models.backbones.vit5_weights import RELEASED_FILES, RELEASED_URL, checkpoint_filter_fn

HF_HUB_ID = 'FengWang3211/ViT-5'  # where released_weights (vit5_released.py) point
# pretrained_cfg entries that name the weights' source: with one, no hub file is needed
SOURCES = ('file', 'url', 'state_dict', 'hf_hub_id', 'hf_hub_filename')


def _cfg(file: str, size: int) -> Dict[str, Any]:
    return dict(
        hf_hub_id=HF_HUB_ID, hf_hub_filename=file, url=RELEASED_URL.format(file),
        custom_load='hf', num_classes=1000, input_size=(3, size, size), pool_size=None,
        # the reference evaluates with --eval-crop-ratio 1.0, bicubic, ImageNet mean/std
        crop_pct=1.0, interpolation='bicubic', mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD, first_conv='patch_embed.proj', classifier='head',
        license='apache-2.0', paper_ids='arXiv:2602.08071',
        paper_name='ViT-5: Vision Transformers for the Mid-2020s',
        origin_url='https://github.com/wangf3014/ViT-5')


# one entry per released file (vit5_released.py), named as the file: vit5_base_patch16_384.pth
default_cfgs = generate_default_cfgs({
    f'{name}.in1k': _cfg(f'{name}.pth', int(name.rsplit('_', 1)[1]))
    for name in (file[:-len('.pth')] for file in RELEASED_FILES)
})


def _build(in_chans: int = 3, **kwargs) -> ViT5:
    """timm's arguments (``in_chans``) to ViT5's, initialised as timm models are when built."""
    model = ViT5(in_channels=in_chans, out_type='head', **kwargs)
    # not init_weights(): outside a runner, mmengine's would print every parameter's init
    model.init_from_scratch()
    return model


def _reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to ``url``'s host (or the proxy the environment names for
    it) opens within ``timeout`` seconds."""
    import socket
    import urllib.parse
    import urllib.request
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ''):
        parts = urllib.parse.urlsplit(proxy if '://' in proxy else f'http://{proxy}')
    port = parts.port or (443 if parts.scheme == 'https' else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def check_hub_file(variant: str) -> None:
    """Raise at once, in one line, where ``pretrained=True`` could only end in
    huggingface_hub's errors after its retries: the released file of ``variant`` is not in
    the Hugging Face cache, and the hub is off (``HF_HUB_OFFLINE``) or cannot be reached.

    Raises:
        FileNotFoundError: Naming the file, the cache looked in and the local-file route,
            ``pretrained_cfg_overlay=dict(file=PATH)``.
    """
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:  # timm then downloads the url into the torch hub cache
        return
    file = default_cfgs[variant].default.hf_hub_filename
    if isinstance(try_to_load_from_cache(HF_HUB_ID, file, cache_dir=constants.HF_HUB_CACHE),
                  str):
        return
    why = 'HF_HUB_OFFLINE is set' if constants.HF_HUB_OFFLINE else \
        None if _reachable(constants.ENDPOINT) else f'{constants.ENDPOINT} cannot be reached'
    if why:
        raise FileNotFoundError(
            f'{variant}: pretrained=True needs {HF_HUB_ID}/{file}, which is not in the '
            f'Hugging Face cache {constants.HF_HUB_CACHE}, and {why}; download it where there '
            f'is network (e.g. {RELEASED_URL.format(file)}) and load it with '
            f"timm.create_model('{variant}', pretrained=True, "
            "pretrained_cfg_overlay=dict(file=PATH))")


def _create(variant: str, pretrained: bool, pretrained_cfg_overlay: Optional[dict] = None,
            **kwargs) -> ViT5:
    out_indices = kwargs.pop('out_indices', 3)  # features_only: the last 3 blocks, as timm's ViT
    # a user's file or URL is read as the released one is (the ``model`` entry, not timm's
    # ``model_ema`` first): timm resets custom_load when the overlay names another source
    overlay = dict(pretrained_cfg_overlay or {})
    if pretrained and not any(overlay.get(k) for k in SOURCES):
        check_hub_file(variant)
    overlay.setdefault('custom_load', 'hf')
    return build_model_with_cfg(
        _build, variant, pretrained, pretrained_cfg_overlay=overlay,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'), **kwargs)


@register_model
def vit5_small_patch16_224(pretrained: bool = False, **kwargs) -> ViT5:
    """ViT-5-S/16 at 224 (22M parameters, ImageNet-1k top-1 82.2)."""
    model_args = dict(arch='small', img_size=224)
    return _create('vit5_small_patch16_224', pretrained, **dict(model_args, **kwargs))


@register_model
def vit5_base_patch16_224(pretrained: bool = False, **kwargs) -> ViT5:
    """ViT-5-B/16 at 224 (87M parameters, ImageNet-1k top-1 84.2)."""
    model_args = dict(arch='base', img_size=224)
    return _create('vit5_base_patch16_224', pretrained, **dict(model_args, **kwargs))


@register_model
def vit5_large_patch16_224(pretrained: bool = False, **kwargs) -> ViT5:
    """ViT-5-L/16 at 224 (304M parameters, ImageNet-1k top-1 84.9)."""
    model_args = dict(arch='large', img_size=224)
    return _create('vit5_large_patch16_224', pretrained, **dict(model_args, **kwargs))


@register_model
def vit5_base_patch16_384(pretrained: bool = False, **kwargs) -> ViT5:
    """ViT-5-B/16 fine-tuned at 384 (ImageNet-1k top-1 85.4)."""
    model_args = dict(arch='base', img_size=384)
    return _create('vit5_base_patch16_384', pretrained, **dict(model_args, **kwargs))


@register_model
def vit5_large_patch16_384(pretrained: bool = False, **kwargs) -> ViT5:
    """ViT-5-L/16 fine-tuned at 384 (ImageNet-1k top-1 86.0)."""
    model_args = dict(arch='large', img_size=384)
    return _create('vit5_large_patch16_384', pretrained, **dict(model_args, **kwargs))

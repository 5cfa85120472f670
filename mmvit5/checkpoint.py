"""Reading checkpoint files: local paths and URLs, the released DeiT-style layout, mmengine's,
and plain dicts, as PyTorch files (``torch.load(weights_only=True)``) or ``.safetensors``
(tensors only, no pickle). File formats only; what a ViT-5 makes of the keys is
:func:`mmvit5.models.backbones.vit5_weights.checkpoint_filter_fn`, as timm splits it.

A URL is downloaded once into the torch hub cache, ``torch.hub.get_dir()/checkpoints/<file
name>``: the file that mmengine's ``CheckpointLoader`` (``load_from_http``) and
``torch.hub.load_state_dict_from_url`` read for the same URL, so a file that either of them
downloaded, or that a user put there by hand, is used with no network.

mmengine's own loader (``load_from``, ``runner.load_checkpoint``, ``tools/test.py``) reads
local ``.safetensors`` files through :func:`load_from_safetensors`, registered here.
"""
import http.client
import os
import pickle
import sys
import zipfile
from typing import Dict, Optional
from urllib.parse import urlparse

import safetensors
import safetensors.torch
import torch
from mmengine.dist import get_dist_info
from mmengine.logging import print_log
from mmengine.registry import WEIGHT_INITIALIZERS

# Keys under which the known layouts keep the weights, in the order they are looked for.
STATE_DICT_KEYS = ('state_dict', 'model', 'model_ema')
URL_SCHEMES = ('http://', 'https://')
SAFETENSORS = '.safetensors'
DOCS = 'docs/en/user_guides/checkpoints.md'


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for the model it is loaded into."""


def is_url(path: str) -> bool:
    """Whether ``path`` is an http(s) URL (downloaded into the torch hub cache)."""
    return isinstance(path, str) and path.startswith(URL_SCHEMES)


def is_safetensors(path: str) -> bool:
    """Whether ``path`` names a safetensors file (by its suffix, as timm and transformers
    tell the formats apart)."""
    return str(path).endswith(SAFETENSORS)


def hub_cache_path(url: str) -> str:
    """Where ``url`` is cached: ``torch.hub.get_dir()/checkpoints/<file name>``, as
    ``torch.hub.load_state_dict_from_url`` (mmengine's ``load_from_http``) keeps it."""
    return os.path.join(torch.hub.get_dir(), 'checkpoints', os.path.basename(urlparse(url).path))


def download_checkpoint(url: str) -> str:
    """The cached file of ``url``, downloaded first when the cache lacks it.

    torch.hub's downloader writes to a temporary file and renames it, so an interrupted
    download leaves no half file in the cache.

    Raises:
        CheckpointError: The download failed (offline, wrong URL); the message names the URL
            and the path where a copy fetched by hand is found.
    """
    cached = hub_cache_path(url)
    if os.path.isfile(cached):
        return cached
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    print_log(f'downloading {url} to {cached}', logger='current')
    try:
        torch.hub.download_url_to_file(url, cached, progress=sys.stderr.isatty())
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError is an OSError
        raise CheckpointError(
            f'cannot download {url} ({type(exc).__name__}: {exc}). Without network, fetch the '
            f'file elsewhere and put it at {cached} (the torch hub cache; TORCH_HOME moves '
            "it), or give the path of a local copy as the checkpoint (init_cfg=dict("
            f"type='Pretrained', checkpoint=PATH)); see {DOCS}") from exc
    return cached


def cached_checkpoint(url: str) -> str:
    """:func:`download_checkpoint` on rank 0 first, then on the other ranks, which find the
    file on a shared disk (and download it themselves on another node), as mmengine's
    ``load_from_http`` does."""
    rank, world_size = get_dist_info()
    if rank == 0:
        path = download_checkpoint(url)
    if world_size > 1:
        torch.distributed.barrier()
        if rank > 0:
            path = download_checkpoint(url)
    return path


def check_checkpoint_file(path: str) -> None:
    """Raise unless ``path`` is a file that looks like a checkpoint, without loading it: a zip
    archive (``torch.save`` since 1.6), a pickle (the legacy format), or a ``.safetensors``
    file whose header covers the whole file. A truncated download lacks the zip's central
    directory at its end, or the safetensors' last tensors."""
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f'checkpoint {path!r} does not exist. Give the path of a file, or the released '
            f"file's URL (downloaded once into the torch hub cache); see {DOCS}")
    try:
        with open(path, 'rb') as f:
            legacy = f.read(1) == b'\x80'  # pickle protocol 2+
    except OSError as exc:
        raise CheckpointError(f'cannot read checkpoint {path!r}: {exc}') from exc
    if is_safetensors(path):
        try:
            with safetensors.safe_open(path, 'pt'):
                return
        except (safetensors.SafetensorError, OSError) as exc:
            raise CheckpointError(f'checkpoint {path!r} is truncated or not a safetensors file '
                                  f'({exc}): download or convert it again') from exc
    if not legacy and not zipfile.is_zipfile(path):
        raise CheckpointError(f'checkpoint {path!r} is truncated or not a PyTorch checkpoint: '
                              'download it again (delete it first if it is in the torch hub '
                              'cache)')


def read_checkpoint(path: str) -> dict:
    """Load a checkpoint file, or a URL's cached copy (:func:`cached_checkpoint`), on the CPU
    with ``weights_only=True``; a ``.safetensors`` file gives its flat dict of tensors.

    :mod:`mmvit5.compat` allow-lists the few non-tensor types that mmengine and the released
    ViT-5 files hold (``argparse.Namespace``, mmengine's log buffers), nothing else: a
    downloaded file is never unpickled with arbitrary code (``load_from_http`` loads with
    torch.hub's ``weights_only=False``).
    """
    if is_url(path):
        path = cached_checkpoint(path)
    check_checkpoint_file(path)
    if is_safetensors(path):
        return safetensors.torch.load_file(path, device='cpu')
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile,
            ValueError) as exc:
        raise CheckpointError(
            f'cannot read checkpoint {path!r} ({type(exc).__name__}: {exc}). The file is '
            'truncated or not a PyTorch checkpoint: download it again.') from exc
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f'checkpoint {path!r} holds a {type(checkpoint).__name__}, '
                              'not a dict of weights')
    return checkpoint


def extract_state_dict(checkpoint: dict, key: Optional[str] = None,
                       prefix: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """The tensors of ``checkpoint`` as a flat state dict.

    Args:
        checkpoint: What :func:`read_checkpoint` returned.
        key: Entry holding the weights; by default the first of ``state_dict`` (mmengine),
            ``model`` (released ViT-5/DeiT), ``model_ema`` that exists, else the dict itself.
        prefix: Keep only keys under this prefix and strip it (e.g. ``'backbone.'`` to take
            the backbone out of an mmdet/mmseg checkpoint). By default ``backbone.`` is
            stripped when the file is a whole detector/segmentor.
    """
    if key is None:
        key = next((k for k in STATE_DICT_KEYS if isinstance(checkpoint.get(k), dict)), None)
    elif key not in checkpoint:
        raise CheckpointError(f'checkpoint has no entry {key!r}; it has {sorted(checkpoint)}')
    state = checkpoint if key is None else checkpoint[key]
    state = {k[len('module.'):] if k.startswith('module.') else k: v
             for k, v in state.items() if isinstance(v, torch.Tensor)}
    if prefix is None and any(k.startswith('backbone.') for k in state):
        prefix = 'backbone.'
    if prefix:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if not state:
            raise CheckpointError(f'checkpoint has no keys under prefix {prefix!r}')
    return state


def load_from_safetensors(filename: str, map_location=None) -> dict:
    """mmengine's checkpoint loader for local ``.safetensors`` files (:func:`read_checkpoint`).

    The tensors stay on the CPU whatever ``map_location`` says; ``load_state_dict`` copies
    them onto the model's device.
    """
    return read_checkpoint(os.path.expanduser(filename))


def register_safetensors_scheme() -> None:
    """Let mmengine's ``CheckpointLoader`` (``load_from``, ``init_cfg``) read local
    ``.safetensors`` files. ``import mmvit5`` calls it once mmengine's runner is imported."""
    from mmengine.runner import CheckpointLoader  # a second to import: only when it is used
    # a regular expression, as mmengine matches its schemes: local paths (no "scheme://") that
    # end in .safetensors; mmengine tries it before its catch-all local loader ('')
    CheckpointLoader.register_scheme(prefixes=r'(?!\w+://).*\.safetensors$',
                                     loader=load_from_safetensors, force=True)


@WEIGHT_INITIALIZERS.register_module(name='ReleasedPretrained')
class ReleasedPretrainedInit:
    """Initialise any module from part of a released (or mmengine) ViT-5 file.

    mmengine's ``Pretrained`` initializer expects a ``state_dict`` entry and cannot read the
    released layout; this one can. It takes the keys under ``prefix``, renames that prefix to
    ``target_prefix`` and loads strictly, e.g. the released classifier into mmpretrain's
    ``LinearClsHead``: ``dict(type='ReleasedPretrained', checkpoint=PATH, prefix='head.',
    target_prefix='fc.')``.

    Args:
        checkpoint (str): Path or URL of the file (a URL is cached as by
            :func:`read_checkpoint`).
        prefix (str): Keys to take from the file.
        target_prefix (str): What the prefix becomes in the module's keys.
        checkpoint_key (str, optional): Entry holding the weights (default as
            :func:`extract_state_dict`).
    """

    def __init__(self, checkpoint: str, prefix: str, target_prefix: str = '',
                 checkpoint_key: Optional[str] = None) -> None:
        self.checkpoint = checkpoint
        self.prefix = prefix
        self.target_prefix = target_prefix
        self.checkpoint_key = checkpoint_key

    def __call__(self, module: torch.nn.Module) -> None:
        state = extract_state_dict(read_checkpoint(self.checkpoint), self.checkpoint_key,
                                   prefix=self.prefix)
        state = {self.target_prefix + k: v for k, v in state.items()}
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise CheckpointError(f'{self.checkpoint}: keys under {self.prefix!r} do not fit '
                                  f'{type(module).__name__}: {exc}') from exc

    def __repr__(self) -> str:
        return f'ReleasedPretrained(checkpoint={self.checkpoint}, prefix={self.prefix})'

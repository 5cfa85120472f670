"""The checkpoints a config loads, checked before anything is built: a missing file or a
failed download is one line naming the config key and the fix, not a traceback out of
``runner.train`` after the model, data and optimizer are set up."""
import os
from typing import List, Optional, Tuple

from mmengine.config import Config

from ..checkpoint import DOCS, CheckpointError, check_checkpoint_file, download_checkpoint, is_url
from ..models.backbones.vit5_weights import RELEASED_FILES, RELEASED_URL

# initialisers whose ``checkpoint`` is a file or URL (mmengine's and mmvit5.checkpoint's)
INIT_TYPES = ('Pretrained', 'ReleasedPretrained')


def pretrained_checkpoints(cfg: Config) -> List[Tuple[str, str]]:
    """(config key, path or URL) of each checkpoint that the model's initialisation
    (``init_cfg=dict(type='Pretrained', checkpoint=...)``, at any depth) or ``load_from``
    reads, e.g. ``('model.backbone.init_cfg.checkpoint', 'https://...pth')``."""
    found = []

    def walk(node, key: str) -> None:
        if isinstance(node, dict):
            if node.get('type') in INIT_TYPES and isinstance(node.get('checkpoint'), str):
                found.append((f'{key}.checkpoint', node['checkpoint']))
            for name, value in node.items():
                walk(value, f'{key}.{name}')
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                walk(value, f'{key}.{i}')

    walk(cfg.get('model'), 'model')
    if isinstance(cfg.get('load_from'), str):
        found.append(('load_from', cfg.load_from))
    return found


def check_pretrained(cfg: Config, path: str = 'config', download: Optional[bool] = None) -> None:
    """Raise, naming the config key and the fix, unless every checkpoint of
    :func:`pretrained_checkpoints` is there: a local file must exist and look like a PyTorch
    checkpoint; a URL is downloaded into the torch hub cache now, when the cache lacks it
    (the model's initialisation then reads the cached file). Other schemes (``s3://``,
    ``open-mmlab://``) are left to mmengine.

    Args:
        cfg (Config): The run's config, ``--cfg-options`` applied.
        path (str): The config file, for messages.
        download (bool, optional): Whether to download missing URLs; by default only on each
            node's first process (``LOCAL_RANK`` 0), the others find the file once it is there
            (two processes downloading the same file are safe, each into a temporary file
            renamed when complete, only wasteful).

    Raises:
        FileNotFoundError: A local checkpoint does not exist.
        CheckpointError: A file is unreadable or truncated, or a download failed.
    """
    if download is None:
        download = os.environ.get('LOCAL_RANK', '0') == '0'
    for key, source in pretrained_checkpoints(cfg):
        try:
            if is_url(source):
                if download:
                    check_checkpoint_file(download_checkpoint(source))
            elif '://' not in source:
                check_checkpoint_file(source)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f'{path}: {key} {source!r} does not exist (cwd {os.getcwd()}). Set it to '
                f'{_suggestion(source)}, e.g. --cfg-options {key}=PATH; see {DOCS}') from exc
        except CheckpointError as exc:
            raise CheckpointError(f'{path}: {key}: {exc}') from exc


def _suggestion(source: str) -> str:
    """The released file's URL for a path named like one, else a generic fix."""
    name = os.path.basename(source)
    if name in RELEASED_FILES:
        return (f'the released URL {RELEASED_URL.format(name)} (downloaded once into the torch '
                'hub cache) or to the path of an existing copy')
    return 'the path of an existing file or the URL of a released one'

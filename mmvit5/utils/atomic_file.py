"""Files that appear complete or not at all, whatever kills the writer."""
import contextlib
import os
from typing import IO, Iterator, Union

PathLike = Union[str, os.PathLike]


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = 'wb', **kwargs) -> Iterator[IO]:
    """Open ``path`` for writing so that it is never seen half-written.

    The block writes to ``<path>.<pid>.part`` in the same folder (one per process: the ranks of
    a distributed run may write the same file, as mmengine's test metrics); a clean exit
    flushes it to disk and renames it onto ``path`` (one atomic step on POSIX), an exception
    removes it and leaves ``path`` as it was. A kill mid-write leaves at most a stale
    ``.part`` file beside it.

    Args:
        path (str | PathLike): the file to (re)place.
        mode (str): ``'w'`` or ``'wb'``, optionally with other letters that ``open`` accepts
            for writing from scratch (no ``'a'``, ``'x'`` or ``'+'``).
        **kwargs: passed to ``open`` (e.g. ``encoding``).
    """
    if 'w' not in mode or any(c in mode for c in 'ax+'):
        raise ValueError(f'atomic_open writes whole files: mode {mode!r} must contain "w" '
                         'and none of "a", "x", "+"')
    path = os.fspath(path)
    part = f'{path}.{os.getpid()}.part'
    f = open(part, mode, **kwargs)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
    except BaseException:
        f.close()
        os.remove(part)
        raise
    f.close()
    os.replace(part, path)


def open_atomic_writes(file: PathLike, mode: str = 'r', **kwargs):
    """``open`` whose ``'w'`` modes go through :func:`atomic_open` (``with`` blocks only)."""
    if 'w' in mode:
        return atomic_open(file, mode, **kwargs)
    return open(file, mode, **kwargs)

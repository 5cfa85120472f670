"""Run a tool, SIGKILLing it halfway through its N-th write to a file whose name holds NAME.

    python tests/kill_while_writing.py last_checkpoint 2 tools/train.py CONFIG ...

The fault sits under Python's ``open``, so it hits whatever writes the file (in place or as a
temporary whose name contains NAME): the file gets the first half of the bytes, on disk, then
the process dies, as an OOM kill or a pre-empted job would leave it. :func:`faulty_open` is
also used in-process (tests/compat_probes.py), with an exception standing for the kill.
"""
import builtins
import os
import runpy
import signal
import sys
from typing import Callable


class HalfThenDie:
    """A file whose first ``write`` puts half the bytes on disk, then calls ``die``."""

    def __init__(self, file, die: Callable[[], None]):
        self.file = file
        self.die = die

    def write(self, data):
        self.file.write(data[:len(data) // 2])
        self.file.flush()
        os.fsync(self.file.fileno())
        self.die()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __getattr__(self, name):
        return getattr(self.file, name)


def faulty_open(name: str, nth: int, die: Callable[[], None], real_open=builtins.open):
    """An ``open`` whose ``nth`` opening for writing of a file named ``*name*`` dies halfway."""
    writes = 0

    def open_(file, mode='r', *args, **kwargs):
        nonlocal writes
        handle = real_open(file, mode, *args, **kwargs)
        if 'w' in mode and name in os.path.basename(os.fspath(file)):
            writes += 1
            if writes == nth:
                return HalfThenDie(handle, die)
        return handle

    return open_


def sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == '__main__':
    NAME, NTH, SCRIPT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    builtins.open = faulty_open(NAME, NTH, sigkill)
    sys.argv = sys.argv[3:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(SCRIPT)))
    runpy.run_path(SCRIPT, run_name='__main__')

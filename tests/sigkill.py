"""Run a tool and SIGKILL it, as an OOM kill or a pre-empted job would, at a chosen point:

    python tests/sigkill.py write last_checkpoint 2 tools/train.py CONFIG ...
    python tests/sigkill.py iteration 3 tools/train.py CONFIG ...

``write NAME N``: halfway through its N-th write to a file whose name holds NAME. The fault
sits under Python's ``open``, so it hits whatever writes the file (in place or as a temporary
whose name contains NAME): the file gets the first half of the bytes, on disk, then the
process dies. :func:`faulty_open` is also used in-process (tests/compat_probes.py), with an
exception standing for the kill.

``iteration I``: in the middle of training iteration I (counted from 1, as the logs and the
``iter_I.pth`` files count), once its backward has run and before its optimizer step.
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


def kill_in_iteration(iteration: int) -> None:
    """SIGKILL before the first optimizer step of training iteration ``iteration``."""
    from mmengine.logging import MessageHub
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def before_step(optimizer, args, kwargs):
        # mmengine's RuntimeInfoHook records the iterations done so far before each one
        if MessageHub.get_current_instance().get_info('iter') == iteration - 1:
            sigkill()

    register_optimizer_step_pre_hook(before_step)


if __name__ == '__main__':
    if sys.argv[1] == 'write':
        builtins.open = faulty_open(sys.argv[2], int(sys.argv[3]), sigkill)
        sys.argv = sys.argv[4:]
    elif sys.argv[1] == 'iteration':
        kill_in_iteration(int(sys.argv[2]))
        sys.argv = sys.argv[3:]
    else:
        raise SystemExit(f'expected write NAME N or iteration I, got {sys.argv[1]!r}')
    SCRIPT = sys.argv[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(SCRIPT)))
    runpy.run_path(SCRIPT, run_name='__main__')

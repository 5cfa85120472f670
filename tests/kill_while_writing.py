"""Run a tool, SIGKILLing it halfway through its N-th write to a file whose name holds NAME.

    python tests/kill_while_writing.py last_checkpoint 2 tools/train.py CONFIG ...

The fault sits under Python's ``open``, so it hits whatever writes the file (in place or as a
temporary whose name contains NAME): the file gets the first half of the bytes, on disk, then
the process dies, as an OOM kill or a pre-empted job would leave it.
"""
import builtins
import os
import runpy
import signal
import sys

NAME, NTH, SCRIPT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
writes = 0
real_open = builtins.open


class HalfThenKill:

    def __init__(self, file):
        self.file = file

    def write(self, data):
        self.file.write(data[:len(data) // 2])
        self.file.flush()
        os.fsync(self.file.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __getattr__(self, name):
        return getattr(self.file, name)


def faulty_open(file, mode='r', *args, **kwargs):
    global writes
    handle = real_open(file, mode, *args, **kwargs)
    if 'w' in mode and NAME in os.path.basename(os.fspath(file)):
        writes += 1
        if writes == NTH:
            return HalfThenKill(handle)
    return handle


builtins.open = faulty_open
sys.argv = sys.argv[3:]
sys.path.insert(0, os.path.dirname(os.path.abspath(SCRIPT)))
runpy.run_path(SCRIPT, run_name='__main__')

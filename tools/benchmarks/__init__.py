"""``benchmarks`` as the tools import it: the checkout's ``benchmarks/`` package.

``python tools/X.py`` puts ``tools/`` first on ``sys.path`` (Python adds the directory of the
script it runs), so ``import benchmarks`` finds this package, from any working directory and
without a ``sys.path`` edit in any tool. Its modules are the files of ``benchmarks/`` beside
``tools/`` (``__path__``), so each is imported once, from its one place, and knows its real
location (``results/``, the checkout's commit). ``benchmarks/`` itself is not installed with
mmvit5: the tools run from a checkout, with mmvit5 installed (``tools/install.sh``).
"""
import os.path as osp

__path__ = [osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'benchmarks')]

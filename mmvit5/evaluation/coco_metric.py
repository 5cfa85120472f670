"""mmdet's ``CocoMetric`` on a choice of COCO evaluator: faster-coco-eval (C++) or pycocotools.

The recipes' evaluators are ``FasterCocoMetric``; ``coco_backend`` picks the evaluator, and
the numbers are pycocotools' either way (tests/test_coco_metric.py compares them bit for bit;
``tools/benchmark_coco_eval.py`` measures the difference in time).
"""
import importlib.metadata
import inspect
from contextlib import contextmanager
from typing import Optional, Sequence, Tuple

from mmdet.evaluation.metrics import CocoMetric
from mmdet.evaluation.metrics import coco_metric as mmdet_coco_metric
from mmengine.logging import MMLogger
from mmengine.registry import METRICS

FASTER, PYCOCOTOOLS = 'faster_coco_eval', 'pycocotools'
BACKENDS = (FASTER, PYCOCOTOOLS)
# the names through which mmdet 3.3.0's CocoMetric reaches its COCO API, read at call time
_MMDET_NAMES = ('COCO', 'COCOeval', 'COCOevalMP')
_PYCOCOTOOLS_API = (mmdet_coco_metric.COCO, mmdet_coco_metric.COCOeval)


def faster_import_error() -> Optional[str]:
    """Why faster-coco-eval does not import here, or None when it does."""
    try:
        from . import faster_coco  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def coco_api(backend: str) -> Tuple[type, type]:
    """``(COCO, COCOeval)`` of ``backend``, with the interface mmdet's ``CocoMetric`` uses."""
    if backend == PYCOCOTOOLS:
        return _PYCOCOTOOLS_API
    from . import faster_coco
    return faster_coco.COCO, faster_coco.COCOeval


def select_backend(coco_backend: Optional[str], proposal_nums: Sequence[int]) -> Tuple[str, str]:
    """The backend that will run for ``coco_backend`` and the reason, for the log.

    Raises:
        ValueError: ``coco_backend`` is not one of :data:`BACKENDS` (or None), or it asks for
            faster-coco-eval where it cannot give pycocotools' numbers.
        ImportError: ``coco_backend='faster_coco_eval'`` and faster-coco-eval does not import.
    """
    if coco_backend not in (None, *BACKENDS):
        raise ValueError(f'coco_backend={coco_backend!r}: expected one of {BACKENDS}, or None '
                         f'for {FASTER} where it imports and {PYCOCOTOOLS} otherwise')
    if coco_backend == PYCOCOTOOLS:
        return PYCOCOTOOLS, f'coco_backend={PYCOCOTOOLS!r}'
    error = faster_import_error()
    if error is not None:
        if coco_backend == FASTER:
            raise ImportError(f'coco_backend={FASTER!r}, but faster-coco-eval does not import '
                              f'({error}): pip install faster-coco-eval (it comes with '
                              f'mmvit5[benchmark]), or set coco_backend={PYCOCOTOOLS!r}')
        return PYCOCOTOOLS, (f'faster-coco-eval does not import ({error}); pip install '
                             f'faster-coco-eval for a faster evaluation with the same numbers')
    if list(proposal_nums) != sorted(proposal_nums):
        # faster-coco-eval sorts maxDets before evaluating, pycocotools keeps their order
        # (and keeps the last one's detections only): the numbers would differ
        reason = (f'proposal_nums={tuple(proposal_nums)} is not in ascending order, which '
                  f'faster-coco-eval would sort and pycocotools does not')
        if coco_backend == FASTER:
            raise ValueError(f'coco_backend={FASTER!r}: {reason}; give proposal_nums in '
                             f'ascending order, or set coco_backend={PYCOCOTOOLS!r}')
        return PYCOCOTOOLS, reason
    return FASTER, (f'coco_backend={FASTER!r}' if coco_backend == FASTER
                    else 'faster-coco-eval imports')


@contextmanager
def mmdet_coco_api(backend: str):
    """Within the block, mmdet's ``CocoMetric`` evaluates with ``backend``.

    ``CocoMetric`` (mmdet 3.3.0) calls ``COCO``, ``COCOeval`` and ``COCOevalMP`` by their
    module-level names and takes no argument to change them; they are swapped for the block
    only (mmengine computes metrics once, on rank 0, in the main thread).
    """
    if backend == PYCOCOTOOLS:
        yield
        return
    coco, evaluator = coco_api(backend)
    saved = {name: getattr(mmdet_coco_metric, name) for name in _MMDET_NAMES}
    # COCOevalMP too: use_mp_eval spreads pycocotools over processes; the C++ evaluator
    # needs none
    for name, value in zip(_MMDET_NAMES, (coco, evaluator, evaluator)):
        setattr(mmdet_coco_metric, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(mmdet_coco_metric, name, value)


def backend_version(backend: str) -> str:
    """The installed version of ``backend``'s distribution."""
    return importlib.metadata.version({FASTER: 'faster-coco-eval'}.get(backend, backend))


@METRICS.register_module()
class FasterCocoMetric(CocoMetric):
    """mmdet's ``CocoMetric`` evaluated by faster-coco-eval where it imports, giving
    pycocotools' numbers several times faster; else by pycocotools, as mmdet does.

    Every result is pycocotools' bit for bit: faster-coco-eval computes the per-image matches
    and the accumulated precision and recall, and pycocotools' ``summarize`` reads them
    (:class:`mmvit5.evaluation.faster_coco.COCOeval` says why). Where faster-coco-eval would
    depart (``proposal_nums`` out of ascending order) pycocotools runs, or with
    ``coco_backend='faster_coco_eval'`` the metric refuses. Each evaluation logs one line
    naming the backend that ran and why.

    Args:
        coco_backend (str, optional): ``'faster_coco_eval'`` or ``'pycocotools'``. None (the
            default): faster-coco-eval where it imports, else pycocotools.
        **kwargs: ``CocoMetric``'s arguments (``ann_file``, ``metric``, ``proposal_nums``,
            ...).
    """

    def __init__(self, coco_backend: Optional[str] = None, **kwargs) -> None:
        default_nums = inspect.signature(CocoMetric).parameters['proposal_nums'].default
        self.coco_backend, self.backend_reason = select_backend(
            coco_backend, kwargs.get('proposal_nums', default_nums))
        with mmdet_coco_api(self.coco_backend):  # the ground truth is loaded here
            super().__init__(**kwargs)

    def compute_metrics(self, results: list) -> dict:
        MMLogger.get_current_instance().info(
            f'COCO evaluation by {self.coco_backend} {backend_version(self.coco_backend)} '
            f'({self.backend_reason})')
        with mmdet_coco_api(self.coco_backend):
            return super().compute_metrics(results)

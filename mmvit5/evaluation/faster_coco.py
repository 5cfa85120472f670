"""faster-coco-eval's ``COCO`` and ``COCOeval`` where mmdet's ``CocoMetric`` would use
pycocotools', made to give pycocotools' results bit for bit (imported only when that backend
runs).

faster-coco-eval departs from pycocotools in three places, each undone here:

* precision: pycocotools divides by ``tp + fp + np.spacing(1)``, faster-coco-eval (detectron2's
  C++ accumulate) by ``tp + fp``. The two agree except where ``tp + fp == 1``: a curve whose
  first detection is a true positive and whose next one is not has ``1 / (1 + 2**-52)``
  (``1 - 2**-52``) in pycocotools, ``1.0`` in faster-coco-eval, at every recall threshold up to
  that first detection's recall (:class:`COCOeval` finds those curves);
* ``summarize``: faster-coco-eval reads AP at ``maxDets[-1]``, pycocotools the first at 100 and
  the rest at ``maxDets[2]`` (Lightning-AI/torchmetrics#2560); ``CocoMetric`` always sets
  ``maxDets`` (its ``proposal_nums``, (100, 300, 1000) by default), so pycocotools' own
  ``summarize`` reads the arrays;
* an empty detection list: pycocotools fails to load it (``CocoMetric`` then logs that the
  results are empty and reports nothing), faster-coco-eval evaluates it to -1 everywhere.

A fourth, ``maxDets`` out of ascending order (faster-coco-eval sorts them), is refused by
:func:`mmvit5.evaluation.coco_metric.select_backend`.
"""
from typing import Dict, List

import numpy as np
from faster_coco_eval import COCO as FasterCOCO
from faster_coco_eval import COCOeval_faster
from pycocotools.cocoeval import COCOeval as PycocotoolsCOCOeval

# pycocotools' precision of one true positive alone: 1 / (1 + eps), that is 1 - 2**-52
FIRST_ALONE = 1.0 / (1.0 + np.spacing(1))


class COCO(FasterCOCO):
    """faster-coco-eval's ``COCO``, failing on an empty detection list as pycocotools does."""

    def loadRes(self, resFile, min_score: float = 0.0):
        if isinstance(resFile, list) and not resFile:
            raise IndexError('no detections to evaluate')  # what pycocotools raises
        return super().loadRes(resFile, min_score)


def valid_gt_counts(coco_gt, params) -> np.ndarray:
    """(K, A) ground truths that count for recall, per category (one row without
    ``useCats``) and area range: pycocotools' ``npig``, crowd and out-of-range areas left out.
    """
    cat_ids = [int(c) for c in np.unique(params.catIds)] if params.useCats else []
    row = {c: k for k, c in enumerate(cat_ids)}
    counts = np.zeros((max(len(cat_ids), 1), len(params.areaRng)), dtype=np.int64)
    for ann in coco_gt.loadAnns(coco_gt.getAnnIds(
            imgIds=[int(i) for i in np.unique(params.imgIds)], catIds=cat_ids)):
        if ann.get('iscrowd', 0):
            continue
        k = row[ann['category_id']] if params.useCats else 0
        for a, (low, high) in enumerate(params.areaRng):
            counts[k, a] += low <= ann['area'] <= high
    return counts


class COCOeval(COCOeval_faster):
    """faster-coco-eval's C++ ``evaluate`` and ``accumulate`` with pycocotools' precision and
    ``summarize`` (the module's docstring says where they differ)."""

    summarize = PycocotoolsCOCOeval.summarize

    def evaluate(self):
        # Where pycocotools has FIRST_ALONE, faster-coco-eval has 1.0, and so it has where the
        # first two detections are both true positives (then pycocotools has 1.0 as well). Two
        # probes tell the cases apart: the precision at recall 0 is 1.0 when the first
        # detection is a true positive, the one at recall 1.5 / npig is 1.0 only after a
        # second true positive with no false one before it. The probes ride along with COCO's
        # recall thresholds through the same C++ accumulate.
        params = self.params
        self._gt_counts = valid_gt_counts(self.cocoGt, params)
        self._recall_thresholds = np.asarray(params.recThrs)
        self._probed_counts = np.unique(self._gt_counts[self._gt_counts > 0])
        params.recThrs = np.concatenate([self._recall_thresholds, [0.0],
                                         1.5 / self._probed_counts])
        try:
            super().evaluate()
        finally:
            params.recThrs = self._recall_thresholds
        if not self.separate_eval:  # then one C++ call evaluated and accumulated
            self._pycocotools_precision()

    def accumulate(self):
        super().accumulate()
        if self.separate_eval:
            self._pycocotools_precision()

    def _pycocotools_precision(self) -> None:
        num_thresholds = len(self._recall_thresholds)
        self._paramsEval.recThrs = self._recall_thresholds
        precision = np.ascontiguousarray(self.eval['precision'][:, :num_thresholds])
        at_zero = self.eval['precision'][:, num_thresholds]  # (T, K, A, M)
        probed = self.eval['precision'][:, num_thresholds + 1:]  # (T, counts, K, A, M)
        column: Dict[int, int] = {int(n): i for i, n in enumerate(self._probed_counts)}
        second_true = np.zeros(at_zero.shape, dtype=bool)
        for (k, a), n in np.ndenumerate(self._gt_counts):
            if n > 0:
                second_true[:, k, a] = probed[:, column[int(n)], k, a] == 1.0
        first_alone = (at_zero == 1.0) & ~second_true
        precision[(precision == 1.0) & first_alone[:, None]] = FIRST_ALONE
        self.eval['precision'] = precision
        self.eval['scores'] = np.ascontiguousarray(self.eval['scores'][:, :num_thresholds])
        counts: List[int] = list(self.eval['counts'])
        counts[1] = num_thresholds
        self.eval['counts'] = counts

"""Panoptic quality bookkeeping (Kirillov et al., "Panoptic Segmentation", CVPR 2019): the
per-category sums that mmdet's ``pq_compute_single_core`` fills and its metric averages."""
from collections import defaultdict

OFFSET = 256 * 256 * 256  # pairs a ground-truth and a predicted segment id in one integer
VOID = 0  # the segment id of unlabelled pixels


class PQStatCat:
    """One category's sums: IoU over matched segments, true / false positives, false
    negatives."""

    def __init__(self):
        self.iou = 0.0
        self.tp = 0
        self.fp = 0
        self.fn = 0

    def __iadd__(self, other: 'PQStatCat') -> 'PQStatCat':
        self.iou += other.iou
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        return self


class PQStat:
    """:class:`PQStatCat` a category id, created on first use; ``+=`` adds another."""

    def __init__(self):
        self.pq_per_cat = defaultdict(PQStatCat)

    def __getitem__(self, category_id) -> PQStatCat:
        return self.pq_per_cat[category_id]

    def __iadd__(self, other: 'PQStat') -> 'PQStat':
        for category_id, stat in other.pq_per_cat.items():
            self.pq_per_cat[category_id] += stat
        return self

    def pq_average(self, categories: dict, isthing):
        """PQ, SQ and RQ averaged over the categories with a segment, and per category.

        Args:
            categories (dict): ``{category id: {'isthing': 0 or 1, ...}}``.
            isthing (bool, optional): Only things (True), only stuff (False), or all (None).

        Returns:
            tuple: ``({'pq', 'sq', 'rq', 'n'}, {category id: {'pq', 'sq', 'rq'}})``; a
            category without any segment scores 0 and is not counted in ``n``.
        """
        pq = sq = rq = 0.0
        n = 0
        per_class = {}
        for category_id, info in categories.items():
            if isthing is not None and (info['isthing'] == 1) != isthing:
                continue
            stat = self.pq_per_cat[category_id]
            if stat.tp + stat.fp + stat.fn == 0:
                per_class[category_id] = {'pq': 0.0, 'sq': 0.0, 'rq': 0.0}
                continue
            n += 1
            matched = stat.tp + 0.5 * stat.fp + 0.5 * stat.fn
            scores = {'pq': stat.iou / matched, 'sq': stat.iou / stat.tp if stat.tp else 0,
                      'rq': stat.tp / matched}
            per_class[category_id] = scores
            pq += scores['pq']
            sq += scores['sq']
            rq += scores['rq']
        # upstream divides by n unguarded too: a split without any segment is no evaluation
        return {'pq': pq / n, 'sq': sq / n, 'rq': rq / n, 'n': n}, per_class

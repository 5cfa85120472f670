"""``tools/test.py --show-dir DIR``: every test image drawn into DIR, detection and segmentation
alike."""
import inspect
import os
import os.path as osp
from collections import Counter
from typing import Dict, Optional, Sequence

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class ShowDirHook(Hook):
    """Draw each test image with its prediction (and ground truth) into ``out_dir``, one PNG
    per image, named after its path below the folder that holds every test image
    (``val/batch1/x.jpg`` -> ``out_dir/batch1/x.png``), so that no two pictures share a file;
    images that differ only in their suffix keep it (``x.jpg.png``, ``x.tif.png``).

    mmdet's ``DetVisualizationHook`` puts its drawings under ``<work_dir>/<timestamp>/``, and
    mmseg's ``SegVisualizationHook`` into ``<visualizer.save_dir>/vis_data/vis_image/`` with the
    iteration in the name; this hook gives the same place for both. It draws through the
    runner's visualizer (mmdet's ``DetLocalVisualizer``, mmseg's ``SegLocalVisualizer``), whose
    ``add_datasample`` both take an ``out_file``.

    Args:
        out_dir (str): The folder; a relative one is relative to the current folder.
        score_thr (float): Detections below this score are not drawn (mmdet's default).
        backend_args (dict, optional): How to read the images (mmengine's file backends).
    """

    priority = 'LOW'

    def __init__(self, out_dir: str, score_thr: float = 0.3,
                 backend_args: Optional[dict] = None) -> None:
        self.out_dir = osp.abspath(out_dir)
        self.score_thr = score_thr
        self.backend_args = backend_args

    def before_test(self, runner) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        dataset = runner.test_dataloader.dataset
        self._names = picture_names(
            [dataset.get_data_info(i)['img_path'] for i in range(len(dataset))])
        meta = getattr(runner.visualizer, 'dataset_meta', None) or {}
        if runner.cfg.get('default_scope') == 'mmseg' and meta.get('classes'):
            from mmvit5.utils.palette import usable_palette  # as tools/demo.py draws them
            runner.visualizer.dataset_meta = dict(
                meta, palette=usable_palette(len(meta['classes']), meta.get('palette')))

    def after_test_iter(self, runner, batch_idx: int, data_batch=None,
                        outputs: Optional[Sequence] = None) -> None:
        import mmcv
        from mmengine.fileio import get
        visualizer = runner.visualizer
        options = {}
        if 'pred_score_thr' in inspect.signature(visualizer.add_datasample).parameters:
            options['pred_score_thr'] = self.score_thr  # mmdet's
        for sample in outputs or ():
            image = mmcv.imfrombytes(get(sample.img_path, backend_args=self.backend_args),
                                     channel_order='rgb')
            name = self._names[sample.img_path]
            visualizer.add_datasample(name, image, data_sample=sample, show=False,
                                      out_file=osp.join(self.out_dir, name), **options)


def picture_names(paths: Sequence[str]) -> Dict[str, str]:
    """Image path -> its picture's path below ``--show-dir``: the image's path below the
    folder common to all, ending in ``.png`` instead of its suffix; where two would meet
    (``x.jpg``, ``x.png``), those keep their suffix (``x.jpg.png``, ``x.png.png``)."""
    paths = sorted(set(paths))
    if not paths:
        return {}
    root = osp.commonpath([osp.dirname(p) for p in paths])
    relative = {p: osp.relpath(p, root) for p in paths}
    stems = Counter(osp.splitext(r)[0] for r in relative.values())
    return {p: (osp.splitext(r)[0] if stems[osp.splitext(r)[0]] == 1 else r) + '.png'
            for p, r in relative.items()}

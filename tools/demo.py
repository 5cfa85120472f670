"""Run a trained detector, segmentor or depth model on images: pictures, and predictions as data.

    python tools/demo.py CONFIG CHECKPOINT IMAGE|FOLDER [...] --out-dir vis [--score-thr 0.3]
    python tools/demo.py CONFIG --onnx FILE IMAGE|FOLDER [...] --out-dir vis

mmdet configs go through mmdet's ``DetInferencer`` (boxes and masks drawn), mmseg configs
through ``MMSegInferencer`` (class overlay, in the checkpoint's class colours, or distinct ones
where its dataset had none: :func:`mmvit5.utils.usable_palette`); the scope comes from the
config. With ``--onnx`` a file of ``tools/export_onnx.py`` computes the predictions in ONNX
Runtime (:class:`mmvit5.deploy.predict.OnnxModel`) and the same inferencer loads the images
and draws them, in the classes and colours the file recorded: the same picture as the
checkpoint's. Instances are drawn highest score first, with seeded colour jitter, so that a
picture is the same on every run.

Beside each picture ``OUT_DIR/<name>.png``, the predictions as data, in ``OUT_DIR/preds/``:

- detectors and instance models: ``<name>.json`` in ``DetInferencer``'s format (``labels``,
  ``scores``, ``bboxes`` as x1, y1, x2, y2 pixels, ``masks`` as COCO RLE; every detection,
  not only those drawn), plus ``label_names`` (one per detection) and ``classes``;
- segmentors: ``<name>.png``, the class id of each pixel (8-bit, 16-bit past 255 classes),
  and ``<name>.json`` with ``classes``;
- depth models: ``<name>.npy``, float32 metres (``--depth-format png``: a 16-bit PNG in
  millimetres).

A folder stands for the images in it (sorted); several images show a progress bar.
"""
import argparse
import os
import os.path as osp
import sys
from typing import Optional


def by_score(samples: list) -> list:
    """Instances highest score first: mmdet draws them in order, jittering each mask colour
    by the next random numbers, so the order fixes the picture (the model's own order is
    that of an unsorted top-k)."""
    for sample in samples:
        if 'pred_instances' in sample:
            instances = sample.pred_instances
            sample.pred_instances = instances[instances.scores.argsort(descending=True)]
    return samples


def build_inferencer(config: str, checkpoint: Optional[str], device: str,
                     onnx: Optional[str] = None):
    """mmdet's or mmseg's inferencer of ``config``; with ``onnx`` its predictions come from
    that file in ONNX Runtime (the model it builds is never run)."""
    from mmengine.config import Config  # here, not at the top: --help needs no torch

    import mmvit5  # noqa: F401  its patches first (mmvit5.compat): no pkg_resources warning
    cfg = Config.fromfile(config)
    if cfg.get('default_scope') == 'mmdet':
        from mmdet.apis import DetInferencer
        inferencer = DetInferencer(model=cfg, weights=checkpoint, device=device,
                                   show_progress=False)
    elif cfg.get('default_scope') == 'mmseg':
        from mmseg.apis import MMSegInferencer
        inferencer = MMSegInferencer(model=cfg, weights=checkpoint, device=device)
    else:
        raise ValueError(f'{config}: default_scope {cfg.get("default_scope")!r} is neither '
                         'mmdet nor mmseg')
    predict = inferencer.forward
    if onnx:
        from mmvit5.deploy.predict import OnnxModel
        model = OnnxModel(onnx)
        predict = lambda data, **kwargs: model.predict(data)  # noqa: E731
        inferencer.model.dataset_meta = model.dataset_meta
        inferencer.visualizer.dataset_meta = model.dataset_meta
    inferencer.forward = lambda data, **kwargs: by_score(predict(data, **kwargs))
    if cfg.get('default_scope') == 'mmseg':
        from mmvit5.utils.palette import usable_palette

        # the checkpoint's palette, unless the dataset had none and mmseg made one up
        meta = inferencer.model.dataset_meta
        meta['palette'] = usable_palette(len(meta['classes']), meta.get('palette'))
    return inferencer


IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp')


def expand_images(paths: list) -> list:
    """The image files of ``paths``: a file as it is, a folder as its images, sorted."""
    found = []
    for path in paths:
        if osp.isdir(path):
            found += sorted(osp.join(path, f) for f in os.listdir(path)
                            if f.lower().endswith(IMAGE_SUFFIXES))
        else:
            found.append(path)
    return found


def save_instances(inferencer, sample, out_dir: str, name: str, score_thr: float):
    """``preds/<name>.json`` of an mmdet data sample (DetInferencer's format, and the class
    names); returns the line to print when no detection reaches ``score_thr``, else None."""
    import mmengine
    classes = list(inferencer.model.dataset_meta.get('classes') or ())
    result = inferencer.pred2dict(sample, out_dir)  # writes preds/<name>.json (+ panoptic)
    labels = result.get('labels', [])
    result.update(label_names=[classes[i] if i < len(classes) else str(i) for i in labels],
                  classes=classes)
    mmengine.dump(result, osp.join(out_dir, 'preds', name + '.json'))
    scores = result.get('scores')
    if scores is None or any(s >= score_thr for s in scores):
        return None
    best = f'the best score is {max(scores):.3f}' if scores else 'the model found nothing'
    return (f'[demo] {name}: no detection reaches --score-thr {score_thr} ({best}); nothing '
            'is drawn: lower --score-thr to see them')


def save_map(inferencer, prediction, out_dir: str, name: str, depth_format: str):
    """``preds/<name>.png`` (class ids) and ``<name>.json`` (class names) of a segmentor's
    ``prediction`` (H, W); ``preds/<name>.npy`` (metres) or ``.png`` (16-bit millimetres) of a
    depth model's."""
    import cv2
    import mmengine
    import numpy as np
    folder = osp.join(out_dir, 'preds')
    os.makedirs(folder, exist_ok=True)
    if type(inferencer.model).__name__ == 'DepthEstimator':
        depth = np.asarray(prediction, np.float32)
        if depth_format == 'png':
            cv2.imwrite(osp.join(folder, name + '.png'),
                        np.clip(np.round(depth * 1000), 0, 65535).astype(np.uint16))
        else:
            np.save(osp.join(folder, name + '.npy'), depth)
        return
    classes = list(inferencer.model.dataset_meta.get('classes') or ())
    cv2.imwrite(osp.join(folder, name + '.png'),
                np.asarray(prediction).astype(np.uint8 if len(classes) <= 256 else np.uint16))
    mmengine.dump(dict(sem_seg=name + '.png', classes=classes),
                  osp.join(folder, name + '.json'))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog='Writes OUT_DIR/<name>.png (the picture) and, in OUT_DIR/preds/: <name>.json '
        '(detectors: DetInferencer\'s labels, scores, bboxes, masks as COCO RLE, with '
        'label_names and classes); <name>.png of class ids and <name>.json of class names '
        '(segmentors); <name>.npy in metres or, with --depth-format png, a 16-bit PNG in '
        'millimetres (depth). When no detection reaches --score-thr it says so, with the best '
        'score. A folder stands for its images, with a progress bar.')
    parser.add_argument('config')
    parser.add_argument('inputs', nargs='+', metavar='CHECKPOINT IMAGE',
                        help='the checkpoint, then images or folders of images (only those '
                        'with --onnx)')
    parser.add_argument('--onnx', help='an ONNX file of tools/export_onnx.py (--part model) '
                        'to run in ONNX Runtime instead of a checkpoint')
    parser.add_argument('--out-dir', default='vis')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detections below this score are not drawn (preds/*.json keeps '
                        'them all)')
    parser.add_argument('--depth-format', choices=('npy', 'png'), default='npy',
                        help='depth models: float32 metres (.npy) or 16-bit millimetres (.png)')
    args = parser.parse_args()
    args.checkpoint, inputs = (None, args.inputs) if args.onnx else \
        (args.inputs[0], args.inputs[1:])
    for path in [args.checkpoint or args.onnx, *inputs]:
        if not osp.exists(path):
            parser.error(f'{path} does not exist')
    args.images = expand_images(inputs)
    if not args.images:
        parser.error('no image given: CONFIG CHECKPOINT IMAGE|FOLDER [...], or CONFIG --onnx '
                     f'FILE IMAGE|FOLDER [...] (images end in {", ".join(IMAGE_SUFFIXES)})')
    inferencer = build_inferencer(args.config, args.checkpoint, args.device, args.onnx)
    import cv2
    import numpy as np
    from mmengine.utils import ProgressBar
    os.makedirs(args.out_dir, exist_ok=True)
    detector = 'Det' in type(inferencer).__name__
    kwargs = dict(pred_score_thr=args.score_thr, return_datasamples=True) if detector else {}
    progress = ProgressBar(len(args.images), file=sys.stderr) if len(args.images) > 1 else None
    for image in args.images:
        name = osp.splitext(osp.basename(image))[0]
        np.random.seed(0)  # mmdet's mask colours: the same picture on every run
        result = inferencer(image, return_vis=True, **kwargs)
        # DetInferencer returns a list per input; MMSegInferencer the item of a single input
        vis, prediction = (r[0] if isinstance(r, list) else r
                           for r in (result['visualization'], result['predictions']))
        out = osp.join(args.out_dir, name + '.png')
        cv2.imwrite(out, vis[..., ::-1])  # RGB -> BGR for cv2
        note = save_instances(inferencer, prediction, args.out_dir, name, args.score_thr) \
            if detector else save_map(inferencer, prediction, args.out_dir, name,
                                      args.depth_format)
        if note:
            print(note, file=sys.stderr)
        if progress:
            progress.update()
        else:
            print(f'[demo] {image} -> {out}, predictions in '
                  f'{osp.join(args.out_dir, "preds")}', file=sys.stderr)
    if progress:
        print(f'\n[demo] {len(args.images)} images -> {args.out_dir}, predictions in '
              f'{osp.join(args.out_dir, "preds")}', file=sys.stderr)


if __name__ == '__main__':
    main()

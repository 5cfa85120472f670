"""Run a trained detector or segmentor on images and write visualizations as PNG.

    python tools/demo.py CONFIG CHECKPOINT IMAGE [IMAGE ...] --out-dir vis [--score-thr 0.3]
    python tools/demo.py CONFIG --onnx FILE IMAGE [IMAGE ...] --out-dir vis

mmdet configs go through mmdet's ``DetInferencer`` (boxes and masks drawn), mmseg configs
through ``MMSegInferencer`` (class overlay, in the checkpoint's class colours, or distinct ones
where its dataset had none: :func:`mmvit5.utils.usable_palette`); the scope comes from the
config. With ``--onnx`` a file of ``tools/export_onnx.py`` computes the predictions in ONNX
Runtime (:class:`mmvit5.deploy.predict.OnnxModel`) and the same inferencer loads the images
and draws them, in the classes and colours the file recorded: the same picture as the
checkpoint's. Instances are drawn highest score first, with seeded colour jitter, so that a
picture is the same on every run.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('inputs', nargs='+', metavar='CHECKPOINT IMAGE',
                        help='the checkpoint, then the images (only the images with --onnx)')
    parser.add_argument('--onnx', help='an ONNX file of tools/export_onnx.py (--part model) '
                        'to run in ONNX Runtime instead of a checkpoint')
    parser.add_argument('--out-dir', default='vis')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detections below this score are not drawn')
    args = parser.parse_args()
    args.checkpoint, args.images = (None, args.inputs) if args.onnx else \
        (args.inputs[0], args.inputs[1:])
    if not args.images:
        parser.error('no image given: CONFIG CHECKPOINT IMAGE [IMAGE ...], or CONFIG --onnx '
                     'FILE IMAGE [IMAGE ...]')
    for path in [args.checkpoint or args.onnx, *args.images]:
        if not osp.isfile(path):
            parser.error(f'{path} does not exist')
    inferencer = build_inferencer(args.config, args.checkpoint, args.device, args.onnx)
    import cv2
    os.makedirs(args.out_dir, exist_ok=True)
    kwargs = dict(pred_score_thr=args.score_thr) if 'Det' in type(inferencer).__name__ else {}
    import numpy as np
    for i, image in enumerate(args.images):
        np.random.seed(0)  # mmdet's mask colours: the same picture on every run
        vis = inferencer(image, return_vis=True, **kwargs)['visualization']
        # DetInferencer returns a list per input; MMSegInferencer the array of a single input
        vis = vis[0] if isinstance(vis, list) else vis
        out = osp.join(args.out_dir, osp.splitext(osp.basename(image))[0] + '.png')
        cv2.imwrite(out, vis[..., ::-1])  # RGB -> BGR for cv2
        print(f'[demo] {i + 1}/{len(args.images)} {image} -> {out}', file=sys.stderr)


if __name__ == '__main__':
    main()

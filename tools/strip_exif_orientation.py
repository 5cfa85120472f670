"""Set the EXIF orientation of images to 1 (as stored), in place: two bytes of each file change,
the compressed pixels do not. For photos whose annotations were drawn on the stored pixels,
which mmcv would otherwise load turned (``tools/finetune.py`` names them and this command).

    python tools/strip_exif_orientation.py IMAGE_OR_FOLDER... [--dry-run]

A folder stands for every JPEG, PNG, WebP and TIFF below it. Guide:
docs/en/user_guides/custom_dataset.md.
"""
import argparse
import os
import os.path as osp
import struct

SUFFIXES = ('.jpg', '.jpeg', '.png', '.webp', '.tif', '.tiff')


def image_files(paths):
    for path in paths:
        if osp.isdir(path):
            for folder, _, names in sorted(os.walk(path)):
                yield from (osp.join(folder, n) for n in sorted(names)
                            if n.lower().endswith(SUFFIXES))
        elif osp.isfile(path):
            yield path
        else:
            raise SystemExit(f'[strip_exif_orientation] {path!r} does not exist; pass image '
                             'files or folders')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('paths', nargs='+', help='image files, or folders of them')
    parser.add_argument('--dry-run', action='store_true',
                        help='name the files that carry an orientation, change nothing')
    args = parser.parse_args(argv)
    from mmvit5.utils.image_frames import TURNS, read_frame, strip_orientation
    changed = 0
    for path in image_files(args.paths):
        try:
            orientation = read_frame(path).orientation
            if orientation != 1 and (args.dry_run or strip_orientation(path)):
                changed += 1
                print(f'[strip_exif_orientation] {path}: orientation {orientation} '
                      f'({TURNS[orientation]}) -> 1')
        except ValueError as e:  # names the file
            raise SystemExit(f'[strip_exif_orientation] {e}')
        except (OSError, struct.error) as e:  # a file it may not write, or cut short
            raise SystemExit(f'[strip_exif_orientation] {path!r}: {e}; copy the file again '
                             'from its source, or make it writable')
    verb = 'would set' if args.dry_run else 'set'
    print(f'[strip_exif_orientation] {verb} {changed} orientation{"s" * (changed != 1)} to 1')


if __name__ == '__main__':
    main()

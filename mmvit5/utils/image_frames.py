"""The frame an image is loaded in, read from its header without decoding a pixel: the size as
stored and the EXIF orientation that mmcv applies when it decodes. ``tools/finetune.py`` checks
that the annotations are in that frame; ``tools/strip_exif_orientation.py`` sets the tag to 1.

mmcv's ``LoadImageFromFile`` turns an image as its orientation tag says when ``color_type`` is
'color' or 'grayscale' (the default, and every recipe's), with OpenCV and Pillow alike: a
151x192 phone photo tagged 6 loads as 192x151. OpenCV reads the tag from the EXIF block only;
Pillow also from XMP (``tiff:Orientation``) where EXIF has none. 'unchanged' and the
``*_ignore_orientation`` types load the pixels as stored, and so does mmseg's ``LoadAnnotations``
read a mask. libtiff and Pillow turn a TIFF whatever the type, and Pillow reports its size
turned.
"""
import re
import struct
import zlib
from typing import List, NamedTuple, Sequence, Tuple

from PIL import Image

from ..checks import count

ORIENTATION = 0x0112  # the EXIF / TIFF tag
TURNS = {2: 'mirrored', 3: 'turned 180°', 4: 'flipped upside down',
         5: 'mirrored and turned 90° counter-clockwise', 6: 'turned 90° clockwise',
         7: 'mirrored and turned 90° clockwise', 8: 'turned 90° counter-clockwise'}
SWAPS = (5, 6, 7, 8)  # the orientations that swap width and height
STRIP = 'python tools/strip_exif_orientation.py'
_XMP = re.compile(rb'tiff:Orientation(?:="|>)([0-9])')


class ImageFrame(NamedTuple):
    """Sizes are (width, height)."""
    stored: Tuple[int, int]  #: the pixels as stored
    orientation: int  #: the tag the loader reads; 1 where there is none
    turned: bool  #: whether the loader turns the pixels as the tag says

    @property
    def loaded(self) -> Tuple[int, int]:
        """What mmcv's ``LoadImageFromFile`` gives."""
        return self._frame(self.turned)

    @property
    def other(self) -> Tuple[int, int]:
        """The frame the loader does not give: the stored one, or the upright one."""
        return self._frame(not self.turned)

    def _frame(self, turned: bool) -> Tuple[int, int]:
        return self.stored[::-1] if turned and self.orientation in SWAPS else self.stored


class LoadRule(NamedTuple):
    """How a pipeline's ``LoadImageFromFile`` decodes (:func:`load_rule`)."""
    upright: bool  #: turns images as their orientation says
    backend: str  #: mmcv's ``imdecode_backend``
    color_type: str


UPRIGHT = LoadRule(True, 'cv2', 'color')  # mmcv's LoadImageFromFile as configured by default
AS_STORED = LoadRule(False, 'pillow', 'unchanged')  # mmseg's LoadAnnotations reading a mask


def load_rule(pipeline: Sequence) -> LoadRule:
    """The rule of the first ``LoadImageFromFile`` of ``pipeline`` (mmcv's defaults if none)."""
    for step in pipeline or ():
        if str(step.get('type', '')).split('.')[-1] == 'LoadImageFromFile':
            color_type = step.get('color_type', 'color')
            return LoadRule(color_type in ('color', 'grayscale'),
                            step.get('imdecode_backend', 'cv2'), color_type)
    return UPRIGHT


def read_frame(path: str, rule: LoadRule = UPRIGHT) -> ImageFrame:
    """The frame of the image at ``path`` as ``rule`` loads it; reads the header only (0.3 ms
    a JPEG from the page cache; decoding it would take ~13 ms).

    Raises:
        ValueError: Pillow cannot read the header.
    """
    try:
        with Image.open(path) as image:
            if image.format == 'TIFF':  # turned on opening: Pillow's size is the upright one
                orientation = _valid(image.getexif().get(ORIENTATION))
                size = image.size[::-1] if orientation in SWAPS else image.size
                return ImageFrame(size, orientation, True)
            orientation = _exif_orientation(image.info.get('exif', b''))
            xmp = image.info.get('xmp') or image.info.get('XML:com.adobe.xmp') or b''
            if orientation is None and rule.backend == 'pillow' and xmp:
                found = _XMP.search(xmp if isinstance(xmp, bytes) else xmp.encode())
                orientation = int(found[1]) if found else None
            orientation = _valid(orientation)
            size = image.size
    except Exception as e:  # any failure to parse is the file's
        raise ValueError(f'cannot read the header of image {path!r} ({type(e).__name__}: '
                         f'{e}); replace the file with one that opens') from e
    return ImageFrame(size, orientation, rule.upright and orientation != 1)


def _exif_orientation(blob: bytes):
    """The orientation in an EXIF block, None where it has none (IFD0 read directly: Pillow's
    ``Exif.load`` parses every entry and doubles the cost of a header read)."""
    blob = blob[6:] if blob.startswith(b'Exif\x00\x00') else blob
    if blob[:2] not in (b'II', b'MM'):
        return None
    try:
        entry = _orientation_entry(blob, 0)
        return None if entry is None else \
            struct.unpack_from(_endian(blob, 0) + 'H', blob, entry)[0]
    except struct.error:  # a broken block: OpenCV reads no orientation from it either
        return None


def _valid(orientation) -> int:
    return orientation if orientation in TURNS else 1


def check_frames(items: Sequence[Tuple[str, str, str, Tuple[int, int], ImageFrame]],
                 rule: LoadRule, annotated: str, fix: str) -> str:
    """Fail unless every image loads in the frame its annotations were drawn in.

    Args:
        items: (image path, how to name it, how to name its annotations' size, that size as
            (width, height), its frame (:func:`read_frame`)) an image, e.g. ``('data/a.jpg',
            "'a.jpg' (id 3)", 'the json says', (640, 480), frame)``.
        rule (LoadRule): How the pipeline loads the images.
        annotated (str): What the sizes are, for the messages (e.g. 'the size the json
            gives them').
        fix (str): What to change where an image loads at neither size.

    Returns:
        str: The summary's note on the images with an orientation tag ('' if none).
    """
    tagged, swapped, wrong = [], [], []
    for path, name, source, size, frame in items:
        if frame.orientation != 1:
            tagged.append((path, name, frame))
        if tuple(size) != frame.loaded:
            bad = (path, name, source, size, frame)
            (swapped if tuple(size) == frame.other else wrong).append(bad)
    if swapped:
        path, name, source, size, frame = swapped[0]
        if frame.turned:
            reading = (f'mmcv applies when it loads them, but {annotated} is that of their '
                       'stored pixels, so their annotations are in the stored frame')
            turn = ('strip the tag, leaving the pixels as they are (docs/en/user_guides/'
                    f'custom_dataset.md#phone-photos-exif-orientation): {STRIP} '
                    f'{" ".join(p for p, *_ in swapped)}')
        else:
            reading = (f'the pipelines ignore (LoadImageFromFile color_type='
                       f'{rule.color_type!r}), but {annotated} is that of the upright image')
            turn = ("let mmcv turn them upright: drop color_type from the pipelines' "
                    'LoadImageFromFile')
        raise ValueError(f'{_images(swapped, "carries", "carry")} an EXIF orientation, which '
                         f'{reading} (first: {name}, orientation {frame.orientation}: loads as '
                         f'{_wxh(frame.loaded)}, {source} {_wxh(size)}); {turn}')
    if wrong:
        path, name, source, size, frame = wrong[0]
        raise ValueError(f'{_images(wrong, "loads", "load")} at another size than '
                         f'{annotated} (first: {name} loads as {_wxh(frame.loaded)}, {source} '
                         f'{_wxh(size)}); {fix}')
    return '; '.join(filter(None, (_orientation_note([t for t in tagged if t[2].turned], rule),
                                   _orientation_note([t for t in tagged if not t[2].turned],
                                                     rule))))


def _orientation_note(tagged: List[tuple], rule: LoadRule) -> str:
    if not tagged:
        return ''
    _, name, frame = tagged[0]
    note = (f'{count(len(tagged), "image")} with an EXIF orientation (first: {name}, '
            f'{frame.orientation}: {TURNS[frame.orientation]}): ')
    if not frame.turned:
        return note + (f'loaded as stored, the tag ignored (LoadImageFromFile color_type='
                       f'{rule.color_type!r}), annotations read in that frame')
    note += 'loaded turned as the tag says, annotations read in that frame'
    blind = [p for p, _, f in tagged if f.loaded == f.other]
    if blind:  # a half turn, a flip or a square: the sizes cannot tell the frames apart
        note += (f' ({len(blind)} of them keep their size when turned, so only you can tell: '
                 f'if their annotations were drawn on the stored pixels, {STRIP} '
                 f'{" ".join(blind)})')
    return note


def _images(images: list, one: str, many: str) -> str:
    return f'1 image {one}' if len(images) == 1 else f'{len(images)} images {many}'


def _wxh(size: Tuple[int, int]) -> str:
    return f'{size[0]}x{size[1]} (width x height)'


def strip_orientation(path: str) -> bool:
    """Set the EXIF orientation of the image at ``path`` to 1, in place; every other byte,
    the compressed pixels included, stays as it was. JPEG, PNG, WebP and TIFF.

    Returns:
        bool: Whether the file had another orientation.

    Raises:
        ValueError: The orientation is not in an EXIF block this can write (e.g. XMP only).
    """
    with Image.open(path) as image:
        fmt = image.format
        blob = image.info.get('exif', b'')
    with open(path, 'rb') as f:
        data = f.read()
    if fmt == 'TIFF':
        start = 0
    else:
        blob = blob[6:] if blob.startswith(b'Exif\x00\x00') else blob
        start = data.find(blob) if blob[:2] in (b'II', b'MM') else -1
    entry = _orientation_entry(data, start) if start >= 0 else None
    if entry is None:
        with Image.open(path) as image:
            if _valid(image.getexif().get(ORIENTATION)) == 1:
                return False
        raise ValueError(f'{path!r} has its orientation where this tool cannot set it (in '
                         'XMP, or in an EXIF block after the pixels): save the image upright')
    if struct.unpack_from(_endian(data, start) + 'H', data, entry)[0] == 1:
        return False
    one = struct.pack(_endian(data, start) + 'H', 1)
    with open(path, 'r+b') as f:  # two bytes (and a PNG chunk's CRC), nothing else
        f.seek(entry)
        f.write(one)
        if fmt == 'PNG':  # the eXIf chunk's CRC covers its type and data
            end = start + struct.unpack_from('>I', data, start - 8)[0]
            chunk = data[start - 4:entry] + one + data[entry + 2:end]
            f.seek(end)
            f.write(struct.pack('>I', zlib.crc32(chunk)))
    return True


def _orientation_entry(data: bytes, start: int):
    """Offset of the value of IFD0's orientation entry in the TIFF structure at ``start``."""
    endian = _endian(data, start)
    ifd = start + struct.unpack_from(endian + 'I', data, start + 4)[0]
    for i in range(struct.unpack_from(endian + 'H', data, ifd)[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack_from(endian + 'H', data, entry)[0] == ORIENTATION:
            return entry + 8  # tag, type, count, then the SHORT value
    return None


def _endian(data: bytes, start: int) -> str:
    """The byte order of the TIFF structure at ``start`` ('II': Intel, 'MM': Motorola)."""
    return '<' if data[start:start + 2] == b'II' else '>'

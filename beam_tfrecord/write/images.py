"""Image bytes: sniff the real format, read the size from the header, convert when needed.

Decisions (tested against TensorFlow's decoders):
- JPEG and PNG pass through byte for byte: `tf.io.decode_image(..., channels=3)` decodes
  grayscale, CMYK JPEG and 16-bit, palette, RGBA and LA PNG correctly, so re-encoding them
  would only lose quality and time.
- GIF (first frame), BMP, WebP and TIFF are re-encoded as PNG (lossless).
- A photo with an EXIF orientation other than 1 is written upright (EXIF applied, JPEG quality
  95 or PNG) because TensorFlow ignores EXIF; see orientation.py for the boxes.
- Truncation is caught by structure (JPEG must end with an EOI marker, PNG with IEND), which
  costs nothing; `verify=True` decodes fully as well.
- The pixel count is checked from the header before anything is decoded (decompression bombs).
- Preprocessing (`Preprocess`: --max-side, --resize, --image-format, --jpeg-quality) happens
  once, here. An image already within the limits and in the requested format is copied byte
  for byte. A JPEG that shrinks is decoded in Pillow's draft mode (the decoder scales by 1/2,
  1/4 or 1/8 in the DCT domain, never below the target size), then resized exactly with
  Lanczos: far less to decode (benchmarks/resize.py).
Pillow opens lazily, so `probe` reads only the header.
"""
from __future__ import annotations

import dataclasses
import io
import re
import struct
from typing import Optional, Tuple

from PIL import Image, ImageOps

from beam_tfrecord.records import plain
from beam_tfrecord.records.model import ImageInfo, InputError, PreparedImage

PASSTHROUGH = ("jpeg", "png")
IMAGE_FORMATS = ("keep", "jpeg", "png")
DEFAULT_JPEG_QUALITY = 95  # also what upright re-encoding of EXIF-rotated JPEGs has always used
DEFAULT_MAX_PIXELS = 178_956_970  # Pillow's hard limit (2 x MAX_IMAGE_PIXELS); ~13k x 13k

# Magic numbers of the formats we recognise; the file extension is never trusted.
_SIGNATURES = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
)
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


# Object reprs in exception texts carry the object's address, which differs from run to run:
# Pillow's 'cannot identify image file <_io.BytesIO object at 0x7f...>' names only our buffer
# (dropped), any other repr keeps its type.
_BUFFER_REPR = re.compile(r" ?<_io\.\w+ object at 0x[0-9A-Fa-f]+>")
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def exception_text(e: BaseException) -> str:
  """'Type: message' of an exception, the same in every run (no object addresses)."""
  return _ADDRESS.sub("", _BUFFER_REPR.sub("", f"{type(e).__name__}: {e}"))


def sniff_format(data: bytes) -> Optional[str]:
  """The format named by the file's magic bytes, or None when unrecognised."""
  for magic, name in _SIGNATURES:
    if data.startswith(magic):
      return name
  if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
    return "webp"
  return None


def _channels(image: Image.Image) -> int:
  mode = image.mode
  if mode == "P":
    return 4 if "transparency" in image.info else 3
  if mode == "PA":
    return 4
  return {"1": 1, "L": 1, "I": 1, "F": 1, "LA": 2, "RGBA": 4}.get(
      mode, 1 if mode.startswith("I;") else 3)


def _orientation(image: Image.Image, fmt: str) -> int:
  """EXIF orientation without decoding pixels: Pillow's PNG getexif() loads the whole image
  to look for an eXIf chunk after the pixel data, so PNG/JPEG/WebP read the header's EXIF."""
  try:
    if fmt == "tiff":
      exif = image.getexif()  # TIFF tags are header data
    else:
      raw = image.info.get("exif")
      if not raw:
        return 1
      exif = Image.Exif()
      exif.load(raw)
    value = exif.get(0x0112, 1)
    return value if value in range(1, 9) else 1
  except Exception:  # unreadable EXIF is ignored, like browsers do
    return 1


def _check_complete(data: bytes, fmt: str) -> None:
  if fmt == "jpeg" and b"\xff\xd9" not in data[-64:].rstrip(b"\x00\r\n\x1a"):
    raise InputError("decode", "truncated_image", "JPEG has no end-of-image marker "
                     "(the file is cut short)")
  if fmt == "png" and _PNG_END not in data[-64:]:
    raise InputError("decode", "truncated_image", "PNG has no IEND chunk (the file is cut short)")


def _allow_pillow(max_pixels: int) -> None:
  """Pillow refuses to open images above 2 x Image.MAX_IMAGE_PIXELS; when --max-pixels asks
  for more, raise Pillow's (process-wide) limit. Only ever raised, so threads cannot undo it;
  our own check in probe() then decides, from the header, before anything is decoded."""
  if Image.MAX_IMAGE_PIXELS is not None and max_pixels > 2 * Image.MAX_IMAGE_PIXELS:
    Image.MAX_IMAGE_PIXELS = max_pixels // 2 + 1


# JPEG markers with no length field, and the start-of-frame markers (not DHT, JPG, DAC)
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# segments only stepped over (tables, APPn but APP1, comments): one test each
_SKIPPED = frozenset(range(256)) - _STANDALONE - _SOF - {0xFF, 0xE1, 0xDA}
_MARKER = struct.Struct(">BBH")  # 0xFF, marker, segment length
_FRAME = struct.Struct(">BHHB")  # precision, height, width, components
# ImageInfo and PreparedImage without their frozen __init__'s object.__setattr__ per field
_IMAGE_INFO = plain.maker(ImageInfo)
_PREPARED = plain.maker(PreparedImage)


def jpeg_header(data: bytes) -> Optional[Tuple[int, int, int]]:
  """(width, height, channels) of a plain JPEG read from its markers, or None to ask Pillow:
  any EXIF segment (orientation), a frame that is not 8-bit with 1 or 3 components, or a
  marker structure that does not reach the scan. Pillow's open was 40% of a small image's
  conversion (64x48 JPEGs: ~45 us of ~110 us per image in the writer, cProfile); this reads
  the same few hundred header bytes without building an Image. A segment is read with one
  struct call and tables are stepped over first: 4.2 -> 3.3 us a 64x48 JPEG's nine segments
  (loaded 2-core machine, interleaved medians; the same answers on 60,000 mutated headers)."""
  at, end = 2, len(data)
  frame = None
  segment = _MARKER.unpack_from
  while at + 4 <= end:
    fill, marker, length = segment(data, at)
    if marker in _SKIPPED and fill == 0xFF and length >= 2:
      at += 2 + length  # past the end: the loop ends, None
      continue
    if fill != 0xFF:
      return None
    if marker == 0xFF:  # fill byte
      at += 1
      continue
    if marker in _STANDALONE:
      at += 2
      continue
    if length < 2 or at + 2 + length > end:
      return None
    if marker == 0xE1 and data[at + 4:at + 10] == b"Exif\x00\x00":
      return None
    if marker in _SOF:
      if length < 8 or frame is not None:
        return None
      precision, height, width, components = _FRAME.unpack_from(data, at + 4)
      if precision != 8 or components not in (1, 3) or not width or not height:
        return None
      frame = (width, height, components)
    if marker == 0xDA:  # start of scan: the header is complete
      return frame
    at += 2 + length
  return None


def probe(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageInfo:
  """Format, size, channels and EXIF orientation from the header, without decoding pixels."""
  if not data:
    raise InputError("decode", "empty_file", "the image file is empty")
  fmt = sniff_format(data)
  if fmt is None:
    raise InputError("decode", "unknown_format",
                     f"not a recognised image (first bytes {data[:8]!r})")
  if fmt == "jpeg":
    header = jpeg_header(data)
    if header is not None:
      width, height, channels = header
      if width * height > max_pixels:
        raise InputError("decode", "decompression_bomb",
                         f"{width}x{height} = {width * height} pixels exceeds the limit of "
                         f"{max_pixels} (raise --max-pixels to allow it)")
      _check_complete(data, fmt)
      return _IMAGE_INFO(format=fmt, width=width, height=height, channels=channels)
  _allow_pillow(max_pixels)
  try:
    with Image.open(io.BytesIO(data)) as image:
      width, height = image.size
      if width * height > max_pixels:  # before anything else reads further
        raise InputError("decode", "decompression_bomb",
                         f"{width}x{height} = {width * height} pixels exceeds the limit of "
                         f"{max_pixels} (raise --max-pixels to allow it)")
      channels = _channels(image)
      orientation = _orientation(image, fmt) if fmt in ("jpeg", "png", "tiff", "webp") else 1
  except InputError:
    raise
  except Image.DecompressionBombError as e:
    raise InputError("decode", "decompression_bomb", str(e)) from None
  except Exception as e:  # Pillow raises many types for bad headers
    raise InputError("decode", "corrupt_image", exception_text(e)) from None
  if width <= 0 or height <= 0:
    raise InputError("decode", "corrupt_image", f"image has size {width}x{height}")
  _check_complete(data, fmt)
  return _IMAGE_INFO(format=fmt, width=width, height=height, channels=channels,
                     orientation=orientation)


@dataclasses.dataclass(frozen=True)
class Preprocess:
  """What to do to every image at conversion time (all off by default).

  max_side: scale down (keeping the aspect ratio) so that the longest side is at most this.
  resize:   (width, height) to stretch every image to, like Roboflow's "Stretch to".
  image_format: keep (JPEG/PNG as they are, others as PNG), jpeg, or png.
  jpeg_quality: for JPEGs this tool encodes (never for copied ones).
  """
  max_side: Optional[int] = None
  resize: Optional[Tuple[int, int]] = None
  image_format: str = "keep"
  jpeg_quality: int = DEFAULT_JPEG_QUALITY


def parse_size(text: str) -> Tuple[int, int]:
  """'640x480' -> (640, 480); ValueError for anything else."""
  width, sep, height = text.lower().partition("x")
  if not sep or not width.isdigit() or not height.isdigit() or not int(width) or not int(height):
    raise ValueError(f"--resize must be WIDTHxHEIGHT in pixels, e.g. 640x640, got {text!r}")
  return int(width), int(height)


def target_size(width: int, height: int, pre: Preprocess) -> Tuple[int, int]:
  """The size an upright width x height image is written at."""
  if pre.resize:
    return tuple(pre.resize)
  longest = max(width, height)
  if pre.max_side and longest > pre.max_side:
    scale = pre.max_side / longest
    # the longest side lands exactly on max_side; the other is rounded, at least 1
    return ((pre.max_side, max(1, round(height * scale))) if width >= height else
            (max(1, round(width * scale)), pre.max_side))
  return width, height


def output_format(source_format: str, pre: Preprocess) -> str:
  if pre.image_format != "keep":
    return pre.image_format
  return source_format if source_format in PASSTHROUGH else "png"


def _has_alpha(image: Image.Image) -> bool:
  return "A" in image.getbands() or "transparency" in image.info


def _eight_bit(image: Image.Image) -> Image.Image:
  """16/32-bit integer images (16-bit grayscale PNG, TIFF) -> 8-bit L, keeping the high byte."""
  import numpy as np
  values = np.asarray(image.convert("I"), dtype=np.int64)
  top = 65535 if values.max(initial=0) > 255 else 255
  return Image.fromarray((np.clip(values, 0, top) * 255 // top).astype(np.uint8), "L")


def _resized(image: Image.Image, size: Tuple[int, int]) -> Image.Image:
  if image.size == size:
    return image
  if image.mode in ("1", "P", "PA"):  # palette/bilevel resize only by nearest: go continuous
    image = image.convert("RGBA" if _has_alpha(image) else ("L" if image.mode == "1" else "RGB"))
  elif image.mode.startswith("I;"):
    image = _eight_bit(image)
  return image.resize(size, Image.Resampling.LANCZOS)


def _reencode(data: bytes, source: ImageInfo, upright: bool, size: Tuple[int, int],
              fmt: str, quality: int) -> bytes:
  with Image.open(io.BytesIO(data)) as image:
    image.seek(0)  # first frame of animated GIF/WebP/TIFF
    stored = (size[1], size[0]) if upright and source.orientation in (5, 6, 7, 8) else size
    if source.format == "jpeg" and stored[0] < source.width and stored[1] < source.height:
      image.draft(None, stored)  # DCT-domain downscaling, never below `stored`
    image.load()
    if upright:
      image = ImageOps.exif_transpose(image)
    resized = image.size != size
    image = _resized(image, size)
    out = io.BytesIO()
    if fmt == "jpeg":
      if image.mode.startswith("I"):
        image = _eight_bit(image)
      keep = image if image.mode in ("L", "RGB", "CMYK") else image.convert("RGB")
      # Same-size re-encoding (EXIF rotation, format change) keeps full chroma (4:4:4) to lose
      # as little as possible; a resized image gets the usual 4:2:0, as in users' own loops
      # (measured: 4:4:4 made encoding ~30% slower and files ~20% larger).
      keep.save(out, format="JPEG", quality=quality, subsampling=2 if resized else 0, exif=b"")
      return out.getvalue()
    if image.mode not in ("1", "L", "LA", "RGB", "RGBA", "P", "I;16"):
      image = image.convert("RGBA" if _has_alpha(image) else "RGB")
    image.save(out, format="PNG")
    return out.getvalue()


def prepare(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS,
            verify: bool = False, pre: Preprocess = Preprocess(),
            sha256_hex: Optional[str] = None) -> PreparedImage:
  """Bytes ready for `image/encoded` (see the module docstring for what changes and why).
  `sha256_hex`: the hex SHA-256 of `data` when already known (the read-ahead), kept when the
  bytes are written as they are (dataclasses.replace afterwards cost ~6 us an image)."""
  source = probe(data, max_pixels)
  upright = source.orientation != 1
  shown = ((source.height, source.width) if source.orientation in (5, 6, 7, 8)
           else (source.width, source.height))
  size = target_size(*shown, pre)
  fmt = output_format(source.format, pre)
  if source.format in PASSTHROUGH and not upright and size == shown and fmt == source.format:
    if verify:
      try:
        with Image.open(io.BytesIO(data)) as image:
          image.verify()  # chunk checksums (load() does not check them)
        with Image.open(io.BytesIO(data)) as image:
          image.load()
      except Exception as e:
        raise InputError("decode", "corrupt_image", exception_text(e)) from None
    return _PREPARED(encoded=data, info=source, source=source, sha256_hex=sha256_hex)
  try:
    encoded = _reencode(data, source, upright, size, fmt, pre.jpeg_quality)
  except InputError:
    raise
  except Exception as e:
    raise InputError("decode", "corrupt_image", exception_text(e)) from None
  return _PREPARED(encoded=encoded, info=probe(encoded, max_pixels), source=source)

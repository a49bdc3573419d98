"""Image bytes: sniff the real format, read the size from the header, convert when needed.

JPEG and PNG pass through untouched (lossless, and no decode cost). Pillow opens lazily, so
`probe` reads only the header; the pixels are decoded only when a conversion is needed.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Optional

from PIL import Image

from beam_tfrecord.model import InputError

PASSTHROUGH = ("jpeg", "png")

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


def sniff_format(data: bytes) -> Optional[str]:
  """The format named by the file's magic bytes, or None when unrecognised."""
  for magic, name in _SIGNATURES:
    if data.startswith(magic):
      return name
  if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
    return "webp"
  return None


@dataclasses.dataclass(frozen=True)
class ImageInfo:
  format: str
  width: int
  height: int
  channels: int


_CHANNELS = {"1": 1, "L": 1, "P": 1, "I": 1, "F": 1, "I;16": 1, "LA": 2, "RGB": 3,
             "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "CMYK": 4}


def probe(data: bytes) -> ImageInfo:
  """Format, size and channels from the header, without decoding the pixels."""
  if not data:
    raise InputError("decode", "empty_file", "the image file is empty")
  fmt = sniff_format(data)
  if fmt is None:
    raise InputError("decode", "unknown_format",
                     f"not a recognised image (first bytes {data[:8]!r})")
  try:
    with Image.open(io.BytesIO(data)) as image:
      width, height = image.size
      mode = image.mode
  except Image.DecompressionBombError as e:
    raise InputError("decode", "decompression_bomb", str(e)) from None
  except Exception as e:  # Pillow raises many types for bad headers
    raise InputError("decode", "corrupt_image", f"{type(e).__name__}: {e}") from None
  if width <= 0 or height <= 0:
    raise InputError("decode", "corrupt_image", f"image has size {width}x{height}")
  return ImageInfo(format=fmt, width=width, height=height, channels=_CHANNELS.get(mode, 3))


@dataclasses.dataclass(frozen=True)
class PreparedImage:
  encoded: bytes
  info: ImageInfo


def prepare(data: bytes) -> PreparedImage:
  """Bytes ready for `image/encoded`: JPEG/PNG unchanged, other formats re-encoded as PNG."""
  info = probe(data)
  if info.format in PASSTHROUGH:
    return PreparedImage(encoded=data, info=info)
  try:
    with Image.open(io.BytesIO(data)) as image:
      image.seek(0)  # first frame of animated GIF/WebP/TIFF
      if image.mode not in ("L", "RGB", "RGBA", "LA"):
        image = image.convert("RGBA" if "A" in image.getbands() or "transparency" in image.info
                              else "RGB")
      out = io.BytesIO()
      image.save(out, format="PNG")
  except Image.DecompressionBombError as e:
    raise InputError("decode", "decompression_bomb", str(e)) from None
  except Exception as e:
    raise InputError("decode", "corrupt_image", f"{type(e).__name__}: {e}") from None
  encoded = out.getvalue()
  return PreparedImage(encoded=encoded, info=probe(encoded))

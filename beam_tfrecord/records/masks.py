"""Instance masks: COCO segmentations and pixel polygons -> PNG-encoded 0/1 masks. Pure.

pycocotools is the reference rasterizer (what COCO's own `annToMask` and the official TF
converters use). Its C code trusts its input: a compressed RLE string whose runs add up to more
than the image writes past its buffer, and one that adds up to less decodes silently. So every
segmentation is checked here first, and a bad one is an InputError (an object-level error).

The PNG encoding is the official converters' (research/object_detection and official/vision
create_coco_tf_record.py): an 8-bit grayscale PNG holding 0 and 1, at the image's size, read by
official/vision's TfExampleDecoder(include_mask=True) with tf.io.decode_png(channels=1).

Class masks (the deeplab schema) are one 8-bit grayscale PNG per image, as DeepLab's
build_data.py writes `image/segmentation/class/encoded`: 0 background, a class's label-map id
where it is, IGNORE (255) where nothing may be learnt. `paint` makes one from objects (later
over earlier); a class PNG of the source (VOC's SegmentationClass/) is taken as it is, its
palette indices being the classes, or its colours in VOC's colour map when it was saved as RGB
(`open_class_png`, `class_array`, `voc_indices`, `check_class_values`).
"""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
from typing import Any, Collection, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

from beam_tfrecord.records.model import InputError

# EXIF orientation -> the Pillow transpose that shows the stored pixels upright (as
# ImageOps.exif_transpose does for the photo itself).
_UPRIGHT = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
            4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
            6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
            8: Image.Transpose.ROTATE_90}


def _bad(message: str) -> InputError:
  return InputError("validate", "bad_segmentation", message)


def _check_polygons(polygons: Sequence[Any]) -> List[List[float]]:
  if not polygons:
    raise _bad("the segmentation is an empty list of polygons")
  checked = []
  for polygon in polygons:
    if not isinstance(polygon, (list, tuple)):
      raise _bad(f"a polygon must be a list of x, y numbers, got {polygon!r:.80}")
    if len(polygon) < 6 or len(polygon) % 2:
      raise _bad(f"a polygon needs an even number (at least 6) of coordinates, got "
                 f"{len(polygon)}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in polygon):
      raise _bad(f"a polygon has a non-numeric or non-finite coordinate: {polygon!r:.80}")
    checked.append([float(v) for v in polygon])
  return checked


def _compressed_runs(counts: str) -> List[int]:
  """The run lengths of COCO's compressed RLE string (pycocotools' rleFrString, in Python so
  that a malformed string is rejected instead of handed to C)."""
  runs: List[int] = []
  p = 0
  while p < len(counts):
    x, k, more = 0, 0, True
    while more:
      if p >= len(counts):
        raise _bad("compressed RLE string ends inside a number")
      c = ord(counts[p]) - 48
      if not 0 <= c < 64:
        raise _bad(f"compressed RLE string has an invalid character {counts[p]!r}")
      x |= (c & 0x1F) << (5 * k)
      more = bool(c & 0x20)
      p += 1
      k += 1
      if not more and c & 0x10:
        x |= -1 << (5 * k)
    if len(runs) > 2:
      x += runs[-2]
    runs.append(x)
  return runs


def _check_rle(rle: dict, width: int, height: int) -> dict:
  size, counts = rle.get("size"), rle.get("counts")
  if (not isinstance(size, (list, tuple)) or len(size) != 2 or
      not all(isinstance(v, int) and not isinstance(v, bool) for v in size)):
    raise _bad(f"RLE size must be [height, width], got {size!r:.40}")
  if list(size) != [height, width]:
    raise _bad(f"RLE size {list(size)} is not the image's [height, width] {[height, width]}")
  if isinstance(counts, (list, tuple)):
    runs = counts
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in runs):
      raise _bad("uncompressed RLE counts must be integers")
  elif isinstance(counts, str):
    runs = _compressed_runs(counts)
  else:
    raise _bad(f"RLE counts must be a list or a string, got {type(counts).__name__}")
  if any(v < 0 for v in runs) or sum(runs) != width * height:
    raise _bad(f"RLE runs add up to {sum(runs)} pixels (negative runs: "
               f"{any(v < 0 for v in runs)}), not the image's {width * height}")
  return {"size": [height, width], "counts": list(counts) if isinstance(counts, (list, tuple))
          else counts}


def rasterize_coco(segmentation: Any, width: int, height: int) -> np.ndarray:
  """A COCO `segmentation` (polygons, uncompressed RLE or compressed RLE, as in instances
  JSON) -> uint8 array [height, width] of 0/1, the same pixels as pycocotools' annToMask."""
  from pycocotools import mask as coco_mask
  if isinstance(segmentation, dict):
    rle = _check_rle(segmentation, width, height)
    if isinstance(rle["counts"], list):  # uncompressed (crowd regions in COCO's files)
      rle = coco_mask.frPyObjects(rle, height, width)
    return coco_mask.decode(rle)
  if isinstance(segmentation, (list, tuple)):
    rles = coco_mask.frPyObjects(_check_polygons(segmentation), height, width)
    return np.amax(coco_mask.decode(rles), axis=2)  # the union of the parts
  raise _bad(f"a segmentation must be polygons or an RLE object, got "
             f"{type(segmentation).__name__}")


def rasterize_polygon(points: Sequence[float], width: int, height: int) -> np.ndarray:
  """One polygon in pixel coordinates [x1, y1, x2, y2, ...] (e.g. a YOLO segmentation line
  scaled by the image size) -> uint8 array [height, width] of 0/1, rasterized like COCO's."""
  return rasterize_coco([list(points)], width, height)


def polygon_json(points: Sequence[float], normalized: bool = False) -> str:
  """One polygon [x1, y1, x2, y2, ...] as carried in ObjectAnnotation.segmentation; normalized
  points (YOLO segmentation lines) are scaled by the image size when rasterized."""
  return to_json({"polygon": [float(v) for v in points], "normalized": bool(normalized)})


def from_json(text: Optional[str], width: int, height: int) -> np.ndarray:
  """The segmentation as carried in ObjectAnnotation (compact JSON: COCO's, or a polygon_json)
  -> 0/1 mask."""
  if text is None:
    raise InputError("validate", "missing_segmentation",
                     "--include-masks is on but the object has no segmentation")
  segmentation = json.loads(text)
  if isinstance(segmentation, dict) and "polygon" in segmentation:
    points = _check_polygons([segmentation["polygon"]])[0]
    if segmentation.get("normalized"):
      points = [v * (width if i % 2 == 0 else height) for i, v in enumerate(points)]
    return rasterize_polygon(points, width, height)
  return rasterize_coco(segmentation, width, height)


def to_json(segmentation: Any) -> str:
  """Compact JSON for the small annotation records (hashable, cheap to pickle)."""
  return json.dumps(segmentation, separators=(",", ":"), allow_nan=True)


def transform(mask: np.ndarray, orientation: int = 1,
              size: Optional[Tuple[int, int]] = None) -> np.ndarray:
  """Move a mask with its image: apply an EXIF orientation (stored -> upright frame), then
  resize to size=(width, height) with nearest-neighbour sampling (values stay 0/1)."""
  image = Image.fromarray(mask)
  if orientation in _UPRIGHT:
    image = image.transpose(_UPRIGHT[orientation])
  if size is not None and image.size != tuple(size):
    image = image.resize(tuple(size), Image.Resampling.NEAREST)
  return np.asarray(image)


def encode_png(mask: np.ndarray) -> bytes:
  """uint8 0/1 array -> 8-bit grayscale PNG (the official converters' encoding)."""
  out = io.BytesIO()
  Image.fromarray(mask.astype(np.uint8, copy=False)).save(out, format="PNG")
  return out.getvalue()


# --- class masks (the deeplab schema) ---------------------------------------------------------

BACKGROUND = 0
IGNORE = 255   # DeepLab's ignore_label: VOC's void border, COCO's crowd regions
MAX_CLASS_ID = 254  # ids above do not fit an 8-bit mask beside IGNORE
_CLASS_PNG = "class_png"  # the key of a carried class PNG (class_png_json)
# palette indices (VOC), gray values (SegmentationClassRaw), or VOC's colours flattened to
# RGB (Datumaro's VOC export, an image editor's save), mapped back to their indices
_CLASS_MODES = ("P", "L", "RGB", "RGBA")


def voc_colormap() -> np.ndarray:
  """VOC's 256-entry colour map (the devkit's VOClabelcolormap.m) as uint8 [256, 3]: index
  i's bits spread over r, g, b, three at a time, from each channel's top bit down. 255,
  the void border, is (224, 224, 192). Every entry differs, so a colour names one index."""
  index = np.arange(256)
  cmap = np.zeros((256, 3), np.int64)
  for bit in range(8):
    for channel in range(3):
      cmap[:, channel] |= ((index >> (3 * bit + channel)) & 1) << (7 - bit)
  return cmap.astype(np.uint8)


def _packed(rgb: np.ndarray) -> np.ndarray:
  rgb = rgb.astype(np.uint32)
  return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]


_VOC_CODES = _packed(voc_colormap())
_VOC_ORDER = np.argsort(_VOC_CODES)
_VOC_SORTED = _VOC_CODES[_VOC_ORDER]


def voc_indices(pixels: np.ndarray) -> np.ndarray:
  """uint8 [h, w] class indices of RGB (or opaque RGBA) pixels [h, w, 3|4] in VOC's colour
  map, as Datumaro reads such masks back. InputError bad_class_mask for a colour outside the
  map (antialiasing, JPEG-like noise, another palette) or a transparent pixel."""
  if pixels.shape[-1] == 4:
    if (pixels[..., 3] != 255).any():
      raise _bad_class_png("the RGBA class PNG has transparent pixels: a class mask holds one "
                           "class colour per pixel")
    pixels = pixels[..., :3]
  codes = _packed(pixels)
  at = np.minimum(np.searchsorted(_VOC_SORTED, codes), len(_VOC_SORTED) - 1)
  known = _VOC_SORTED[at] == codes
  if not known.all():
    strange = np.unique(codes[~known])
    shown = ", ".join(f"({c >> 16}, {(c >> 8) & 255}, {c & 255})" for c in strange[:5].tolist())
    raise _bad_class_png(f"the RGB class PNG holds {len(strange)} colour"
                         f"{'s' if len(strange) > 1 else ''} outside VOC's colour map ({shown}"
                         f"{', ...' if len(strange) > 5 else ''}): no class index can be read")
  return _VOC_ORDER[at].astype(np.uint8)


@dataclasses.dataclass(frozen=True)
class ClassMask:
  """One image's class mask as written: the PNG and the values it holds (sorted)."""
  png: bytes
  values: Tuple[int, ...]


def paint(layers: Iterable[Tuple[np.ndarray, int]], width: int, height: int) -> np.ndarray:
  """uint8 [height, width] of BACKGROUND with each (0/1 mask, value) painted in order: a
  later layer over an earlier one. `layers` may be a generator: one mask is held at a time."""
  canvas = np.zeros((height, width), np.uint8)
  for mask, value in layers:
    canvas[mask != 0] = value
  return canvas


def class_mask(canvas: np.ndarray) -> ClassMask:
  """A painted or read class array as written: its PNG (encode_png) and its values."""
  return ClassMask(encode_png(canvas), tuple(int(v) for v in np.unique(canvas)))


def class_png_json(data: bytes) -> str:
  """A source's class PNG carried as ObjectAnnotation.segmentation (base64 in compact JSON):
  read where the annotation is parsed, so the writer makes no second read per image."""
  return to_json({_CLASS_PNG: base64.b64encode(data).decode("ascii")})


def carried_class_png(text: Optional[str]) -> Optional[bytes]:
  """The class PNG class_png_json carries, else None (an object's own segmentation)."""
  if not text or not text.startswith('{"' + _CLASS_PNG):
    return None
  return base64.b64decode(json.loads(text)[_CLASS_PNG])


def _bad_class_png(message: str) -> InputError:
  return InputError("validate", "bad_class_mask", message)


def open_class_png(data: bytes) -> Image.Image:
  """A class PNG opened, its header read (size and mode, nothing decoded): a single-channel
  8-bit PNG (palette or gray), or an RGB(A) one in VOC's colours, else InputError
  bad_class_mask."""
  try:
    image = Image.open(io.BytesIO(data))
  except Exception as e:  # not an image, or over Pillow's decompression-bomb limit
    raise _bad_class_png(f"the class PNG cannot be read ({type(e).__name__})") from None
  if image.format != "PNG" or image.mode not in _CLASS_MODES:
    raise _bad_class_png(f"a class mask must be an 8-bit palette or grayscale PNG (or RGB "
                         f"in VOC's colour map), not {image.format} mode {image.mode}")
  return image


def class_array(image: Image.Image) -> np.ndarray:
  """The class indices of an open_class_png image, decoded: palette indices and gray values
  as they are, VOC's colours as their indices (voc_indices)."""
  try:
    pixels = np.asarray(image)
  except Exception as e:  # truncated or corrupt data
    raise _bad_class_png(f"the class PNG cannot be decoded ({type(e).__name__}: {e})") from None
  return voc_indices(pixels) if pixels.ndim == 3 else pixels


def check_class_values(canvas: np.ndarray, ids: Collection[int]) -> None:
  """InputError unknown_class_index when a value of the class array is neither BACKGROUND,
  IGNORE nor an id."""
  unknown = sorted(set(np.unique(canvas).tolist()) - set(ids) - {BACKGROUND, IGNORE})
  if unknown:
    raise InputError("validate", "unknown_class_index",
                     f"the class PNG holds {', '.join(map(str, unknown[:10]))}, which "
                     f"{'is' if len(unknown) == 1 else 'are'} no class of the label map (nor "
                     f"{BACKGROUND} background or {IGNORE} ignore)")

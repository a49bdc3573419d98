"""Plain records that travel through the pipeline. No Beam, no TensorFlow.

Everything here is small (paths, numbers, labels): these are the only things that may go
through a GroupByKey. Image bytes never live in these records, except PreparedImage: the
shard writer's image in hand, which the schemas encode and nothing groups.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Optional, Tuple

DEFAULT_SPLIT = "train"  # images whose source names no split, without --split
# Split names become file names (SPLIT-00000-of-00004.tfrecord): no separators, no leading dot.
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_split_name(name: str) -> str:
  """The name itself when it is usable as a split (file-name safe), else ValueError."""
  if not isinstance(name, str) or not _SPLIT_NAME.fullmatch(name):
    raise ValueError(f"split name {name!r} must be letters, digits, '_', '.', '-' "
                     "and not start with '.' or '-'")
  return name


@dataclasses.dataclass(frozen=True)
class Box:
  """An axis-aligned box in absolute pixel coordinates of the annotated image, or in [0, 1]
  image units when `normalized` (YOLO labels: the source never reads the image size)."""
  xmin: float
  ymin: float
  xmax: float
  ymax: float
  normalized: bool = False


@dataclasses.dataclass(frozen=True)
class ObjectAnnotation:
  """One labelled object. `label` is the class name; ids come from the label map."""
  label: str
  box: Box
  is_crowd: bool = False
  area: Optional[float] = None
  difficult: Optional[bool] = None
  truncated: Optional[bool] = None
  pose: Optional[str] = None
  id: Optional[int] = None                # the source's annotation id (COCO `id`)
  # COCO segmentation as compact JSON (masks.to_json): only carried with --include-masks,
  # since these records go through shuffles. Rasterized into `mask` (PNG) by the writer.
  segmentation: Optional[str] = None
  mask: Optional[bytes] = None
  # In a dataset with keypoints (records/keypoints.py): the layout's K points as flat
  # (x, y, visibility) triples in the units of `box` (pixels, or [0, 1] when normalized);
  # None in a dataset without keypoints.
  keypoints: Optional[Tuple[float, ...]] = None


@dataclasses.dataclass(frozen=True)
class ImageAnnotation:
  """Everything known about one image before its bytes are read.

  key:       unique, stable identity of the image (its path relative to the image root);
             sorting, hashing for splits and shard ranks use it.
  uri:       where to read the bytes (local path, gs://, s3://), already checked to lie
             inside the image root.
  source_id: the id the annotation format gives the image (COCO image id, else filename).
  width/height: what the annotation claims (None when it says nothing); the header decides.
  size_bytes: file size, filled in when the file is located (for shard sizing).
  labels:    image-level class names (class folders, classification listings); boxes go in
             `objects`.
  keypoint_names: in a dataset with keypoints, the names of the K points each object
             carries (its KeypointLayout's), written per object as image/object/keypoint/text.
  """
  key: str
  uri: str
  source_id: str
  source: str
  objects: Tuple[ObjectAnnotation, ...] = ()
  split: Optional[str] = None
  width: Optional[int] = None
  height: Optional[int] = None
  size_bytes: Optional[int] = None
  labels: Tuple[str, ...] = ()
  keypoint_names: Tuple[str, ...] = ()

  def replace(self, **changes: Any) -> "ImageAnnotation":
    """A copy with `changes`: dataclasses.replace without its per-field __init__ (every image
    is replaced once while located: 12 of the main process's ~70 us per small image,
    cProfile at 200,000 images; this takes ~1 us)."""
    unknown = changes.keys() - _ANNOTATION_FIELDS
    if unknown:
      raise TypeError(f"ImageAnnotation has no field {sorted(unknown)[0]!r}")
    new = object.__new__(ImageAnnotation)
    fields = new.__dict__
    fields.update(self.__dict__)
    fields.update(changes)
    return new


_ANNOTATION_FIELDS = frozenset(f.name for f in dataclasses.fields(ImageAnnotation))


# Stages at which an input can be rejected (issue: machine-readable error records).
STAGES = ("parse", "locate", "read", "decode", "validate", "encode", "write")
# What an error cost: a whole annotation file (or the rest of it), one image, one object,
# or nothing (a warning: the image was converted, e.g. its annotated size was wrong).
LEVELS = ("file", "image", "object", "warning")


_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


@dataclasses.dataclass(frozen=True)
class ErrorRecord:
  """One rejected input: where it came from, at which stage, and why."""
  source: str
  stage: str
  reason: str
  message: str
  key: Optional[str] = None
  level: str = "image"

  def __post_init__(self):
    # exception texts can carry object reprs ('<_io.BytesIO object at 0x7f...>'): without
    # the address, identical runs write identical errors-*.jsonl
    if " at 0x" in self.message:
      object.__setattr__(self, "message", _ADDRESS.sub("", self.message))

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), ensure_ascii=False, sort_keys=True)


class InputError(Exception):
  """A problem with one input that should become an ErrorRecord, not a crash.

  Steps that also report what they did not foresee (`except Exception`) let an ImportError
  through: a package missing from a worker is the environment's, every element would fail
  alike, and as records the run could exit 0 with those inputs gone (issue 39)."""

  def __init__(self, stage: str, reason: str, message: str):
    super().__init__(f"{reason}: {message}")
    self.stage = stage
    self.reason = reason
    self.message = message

  def record(self, source: str, key: Optional[str] = None, level: str = "image") -> ErrorRecord:
    return ErrorRecord(source=source, stage=self.stage, reason=self.reason,
                       message=self.message, key=key, level=level)


@dataclasses.dataclass(frozen=True)
class ImageInfo:
  format: str
  width: int          # as stored (before EXIF orientation)
  height: int
  channels: int       # what tf.io.decode_image(channels=0) returns
  orientation: int = 1


@dataclasses.dataclass(frozen=True)
class PreparedImage:
  encoded: bytes
  info: ImageInfo          # of the encoded bytes (orientation 1 after reorienting)
  source: ImageInfo        # of the original file
  sha256_hex: Optional[str] = None  # of `encoded`, when already computed (the read-ahead)

  def sha256(self) -> str:
    """Hex SHA-256 of the encoded bytes (`image/key/sha256`)."""
    return self.sha256_hex or hashlib.sha256(self.encoded).hexdigest()

"""One image from annotation to serialized Example: read bytes, probe/convert, encode.

Shared by both sinks. Pure apart from reading the file (storage/files.read_bytes).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Callable, List, Mapping, Optional, Tuple

from beam_tfrecord import schemas
from beam_tfrecord.records import keypoints
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError)
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import DEFAULT_MAX_IMAGE_BYTES, read_bytes
from beam_tfrecord.write import images, orientation


@dataclasses.dataclass(frozen=True)
class EncodeOptions:
  bbox_policy: str = "clip"                 # boxes.BBOX_POLICIES
  max_pixels: int = images.DEFAULT_MAX_PIXELS
  exif_frame: str = "auto"                  # orientation.EXIF_FRAMES
  verify_images: bool = False               # fully decode JPEG/PNG, not just check structure
  max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES  # larger files are rejected before reading
  schema: str = schemas.DEFAULT             # schemas.REGISTRY key
  include_masks: bool = False               # rasterize segmentations into image/object/mask
  preprocess: images.Preprocess = images.Preprocess()  # resize / re-encode at conversion time
  renames: Tuple[Tuple[str, str], ...] = ()  # --feature-names, (old, new) pairs
  follow_symlinks: bool = False             # read symlinked images that lead out of the root

  @functools.cached_property
  def record_schema(self) -> schemas.Schema:
    """schemas.from_options(self), kept: convert asks once an image (0.6 us a call, this
    0.1 us; loaded 2-core machine)."""
    return schemas.from_options(self)


@dataclasses.dataclass
class Converted:
  records: Optional[List[bytes]]   # None when the image was rejected; per-object: 0..n
  labels: List[str]
  clipped: int
  reoriented: bool
  errors: List[ErrorRecord]

  @property
  def serialized(self) -> Optional[bytes]:
    """The one record of a one-record-per-image schema (None when rejected)."""
    return None if self.records is None else b"".join(self.records[:1])


def _in_displayed_frame(ann: ImageAnnotation, prepared: images.PreparedImage,
                        options: EncodeOptions, errors: List[ErrorRecord]
                        ) -> Tuple[ImageAnnotation, str]:
  """Put the boxes in the frame of the written image; report a size that disagrees.
  Returns the annotation and the frame its coordinates were given in."""
  src = prepared.source
  frame = orientation.boxes_frame(src.orientation, (src.width, src.height),
                                  (ann.width, ann.height), options.exif_frame)
  expected = (src.width, src.height) if frame == "stored" else orientation.displayed_size(
      src.orientation, src.width, src.height)
  if ((ann.width is not None and ann.width != expected[0]) or
      (ann.height is not None and ann.height != expected[1])):
    errors.append(ErrorRecord(
        source=ann.source, stage="validate", reason="size_mismatch", key=ann.key, level="warning",
        message=f"annotation says {ann.width}x{ann.height}, image header says "
        f"{expected[0]}x{expected[1]}; the header is used"))
  if frame == "displayed" or src.orientation == 1:
    return ann, frame
  objects = tuple(dataclasses.replace(o, box=orientation.to_displayed(
      o.box, src.orientation, src.width, src.height), keypoints=None if o.keypoints is None
      else orientation.points_to_displayed(o.keypoints, o.box.normalized, src.orientation,
                                           src.width, src.height)) for o in ann.objects)
  return ann.replace(objects=objects), frame


def _scaled(ann: ImageAnnotation, prepared: images.PreparedImage) -> ImageAnnotation:
  """Boxes and areas of the upright source image -> pixels of the written (resized) image.
  Normalized boxes are unchanged by this; `area` (pixels) scales by sx * sy."""
  src = prepared.source
  shown = orientation.displayed_size(src.orientation, src.width, src.height)
  sx, sy = prepared.info.width / shown[0], prepared.info.height / shown[1]
  if (sx, sy) == (1.0, 1.0):
    return ann
  # a normalized box (YOLO) and its points do not move; before this, such a box was scaled
  # as if in pixels and came out wrong under --max-side / --resize
  return ann.replace(objects=tuple(o if o.box.normalized else dataclasses.replace(
      o, box=Box(o.box.xmin * sx, o.box.ymin * sy, o.box.xmax * sx, o.box.ymax * sy),
      area=None if o.area is None else o.area * sx * sy,
      keypoints=None if o.keypoints is None else
      keypoints.mapped(o.keypoints, lambda x, y: (x * sx, y * sy))) for o in ann.objects))


def _object_error(ann: ImageAnnotation, obj, e: InputError) -> ErrorRecord:
  """The object-level error of an object whose mask cannot be made (the object is dropped)."""
  return ErrorRecord(source=ann.source, stage=e.stage, reason=e.reason, key=ann.key,
                     level="object", message=f"{obj.label!r} (annotation id {obj.id}): "
                     f"{e.message}")


def _with_masks(ann: ImageAnnotation, prepared: images.PreparedImage, frame: str,
                errors: List[ErrorRecord]) -> ImageAnnotation:
  """Rasterize each object's segmentation in the frame its coordinates are in, then move the
  mask as the image was moved (upright, resized). An unreadable segmentation drops its object
  (an object-level error), so masks and boxes stay aligned."""
  from beam_tfrecord.records import \
      masks  # numpy: writer processes without masks never import it
  src = prepared.source
  if frame == "stored":
    size, turn = (src.width, src.height), src.orientation
  else:
    size, turn = orientation.displayed_size(src.orientation, src.width, src.height), 1
  final = (prepared.info.width, prepared.info.height)
  objects = []
  for obj in ann.objects:
    try:
      mask = masks.transform(masks.from_json(obj.segmentation, *size), turn, final)
    except InputError as e:
      errors.append(_object_error(ann, obj, e))
      continue
    objects.append(dataclasses.replace(obj, segmentation=None, mask=masks.encode_png(mask)))
  return ann.replace(objects=tuple(objects))


def _class_mask(ann: ImageAnnotation, prepared: images.PreparedImage, frame: str,
                label_map: Mapping[str, int], options: EncodeOptions,
                errors: List[ErrorRecord]):
  """The image's class mask (records/masks.ClassMask) at the written size: the source's
  class PNG (VOC's SegmentationClass/) taken as it is, else its objects' segmentations
  painted in order (a crowd as IGNORE); then moved as the image was (upright, resized with
  nearest-neighbour sampling, so no two labels are ever blended). A class PNG that does not
  fit the image is InputError (the image is rejected); an object that cannot be painted is an
  object-level error, the others are painted."""
  from beam_tfrecord.records import masks
  src = prepared.source
  stored = (src.width, src.height)
  shown = orientation.displayed_size(src.orientation, src.width, src.height)
  carried = [masks.carried_class_png(o.segmentation) for o in ann.objects[:1]]
  if carried and carried[0] is not None:
    png = masks.open_class_png(carried[0])
    # the class PNG is in the frame boxes would be in (its size says which, as theirs does)
    frame = orientation.boxes_frame(src.orientation, stored, png.size, options.exif_frame)
    size = stored if frame == "stored" else shown
    if png.size != size:
      raise InputError("validate", "class_mask_size_mismatch",
                       f"the class PNG is {png.size[0]}x{png.size[1]}, its image "
                       f"{size[0]}x{size[1]}")
    canvas = masks.class_array(png)
    masks.check_class_values(canvas, label_map.values())
  else:
    size = stored if frame == "stored" else shown
    canvas = masks.paint(_layers(ann, size, label_map, options, errors), *size)
  turn = src.orientation if frame == "stored" else 1
  return masks.class_mask(masks.transform(canvas, turn, (prepared.info.width,
                                                         prepared.info.height)))


def _layers(ann: ImageAnnotation, size: Tuple[int, int], label_map: Mapping[str, int],
            options: EncodeOptions, errors: List[ErrorRecord]):
  """(0/1 mask, value) of each object that can be painted, in source order: its label-map
  id, IGNORE for a crowd region. One mask at a time (a generator)."""
  from beam_tfrecord.records import masks
  for obj in ann.objects:
    try:
      if obj.label not in label_map:
        raise InputError("validate", "unknown_class",
                         f"class {obj.label!r} is not in the label map")
      if not obj.is_crowd and label_map[obj.label] > masks.MAX_CLASS_ID:
        raise InputError("validate", "class_id_too_large",
                         f"id {label_map[obj.label]} does not fit an 8-bit class mask "
                         f"(ids 1..{masks.MAX_CLASS_ID}; {masks.IGNORE} is ignore)")
      if obj.segmentation is None:
        raise InputError("validate", "missing_segmentation", "the object has no segmentation "
                         "to paint" + ("" if options.include_masks else
                                       " (sources keep segmentations with --include-masks)"))
      mask = masks.from_json(obj.segmentation, *size)
    except InputError as e:
      errors.append(_object_error(ann, obj, e))
      continue
    yield mask, masks.IGNORE if obj.is_crowd else label_map[obj.label]


def image_root(ann: ImageAnnotation) -> Optional[str]:
  """The image root `ann` was resolved in (paths.resolve: uri = join(root, key)), which
  read_bytes keeps a symlinked image to; None for names taken as they are
  (--allow-absolute-paths: key == uri) and object stores (no symlinks there)."""
  if ann.key == ann.uri or paths.is_remote(ann.uri):
    return None
  tail = os.sep + ann.key  # os.path.join(root, key): the key keeps its "/"
  if ann.uri.endswith(tail):
    return ann.uri[:-len(tail)] or os.sep
  return os.path.dirname(ann.uri)  # not made by join: keep to the file's own directory


def read_image(ann: ImageAnnotation, options: EncodeOptions) -> bytes:
  """read_bytes of an annotation's image, with the checks its options ask for."""
  return read_bytes(ann.uri, options.max_image_bytes, ann.size_bytes, options.follow_symlinks,
                    image_root(ann))


def fetch(uri: str, limit: int = DEFAULT_MAX_IMAGE_BYTES, size: Optional[int] = None,
          follow_symlinks: bool = False, root: Optional[str] = None) -> Tuple[bytes, str]:
  """The image bytes and their hex SHA-256: both release the GIL, so the shard writer runs
  this on its read-ahead threads (the digest is `image/key/sha256` when the bytes pass through).
  Files over `limit` bytes are rejected from a stat before reading, and local files checked
  again (symlinks, regular file), as in read_bytes."""
  data = read_bytes(uri, limit, size, follow_symlinks, root)
  return data, hashlib.sha256(data).hexdigest()


def fetch_image(ann: ImageAnnotation, options: EncodeOptions) -> Tuple[bytes, str]:
  """fetch of an annotation's image, with the checks its options ask for."""
  return fetch(ann.uri, options.max_image_bytes, ann.size_bytes, options.follow_symlinks,
               image_root(ann))


def convert(ann: ImageAnnotation, label_map: Mapping[str, int],
            options: EncodeOptions = EncodeOptions(),
            fetched: Optional[Callable[[], Tuple[bytes, str]]] = None) -> Converted:
  """Never raises for bad input: every problem becomes an ErrorRecord (an ImportError is the
  environment's, not the input's, and is raised). `fetched` returns
  fetch(ann.uri) (or raises InputError) when it ran ahead; by default it is called here."""
  errors: List[ErrorRecord] = []
  try:
    data, digest = (fetched() if fetched is not None else (read_image(ann, options), None))
    # the digest is kept when the bytes are written as read
    prepared = images.prepare(data, options.max_pixels, options.verify_images,
                              options.preprocess, digest)
    ann, frame = _in_displayed_frame(ann, prepared, options, errors)
    schema = options.record_schema
    extra = {}
    if schema.class_masks:  # deeplab: one class mask, painted or read, instead of masks
      extra["class_mask"] = _class_mask(ann, prepared, frame, label_map, options, errors)
    elif options.include_masks:
      ann = _with_masks(ann, prepared, frame, errors)
    ann = _scaled(ann, prepared)
    encoded = schema.encode(ann, prepared, label_map, options, **extra)
  except InputError as e:
    return Converted(None, [], 0, False, errors + [e.record(ann.source, ann.key)])
  except ImportError:  # the worker's environment, not this image: every image would fail the
    raise              # same way (a package missing from setup.py), so the job must fail
  except Exception as e:  # a bug or an unforeseen input: report it, never kill the job
    return Converted(None, [], 0, False, errors + [ErrorRecord(
        source=ann.source, stage="encode", reason="unexpected_error", key=ann.key,
        message=images.exception_text(e))])
  return Converted(encoded.records, encoded.labels, encoded.clipped,
                   prepared.source.orientation != 1, errors + encoded.errors)

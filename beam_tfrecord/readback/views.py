"""Reading an output's records back for pictures and statistics: its manifest, its shards,
each record as {key: values} and as an Item (image, boxes, class names) through the schema's
View (schemas/views.py). Records are parsed with the protobuf classes in protos.py: no
TensorFlow import.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from beam_tfrecord.records import protos
from beam_tfrecord.records import tfrecord
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.schemas.views import (NORMALIZED_CORNERS, NORMALIZED_YXYX,  # noqa: F401
                                          PIXEL_XYWH, VIEWS, View, renames, resolve)
from beam_tfrecord.storage import files, paths

# ---------------------------------------------------------------------------------------------
# Reading records
# ---------------------------------------------------------------------------------------------

def parse(serialized: bytes) -> Dict[str, list]:
  """A serialized tf.train.Example as {key: [values]} (bytes, ints or floats)."""
  example = protos.Example.FromString(serialized)
  result = {}
  for key, feature in example.features.feature.items():
    kind = feature.WhichOneof("kind")
    result[key] = list(getattr(feature, kind).value) if kind else []
  return result


def read_manifest(output: str) -> Manifest:
  """The manifest of an output to read back. finalize.output.IncompleteOutput (naming
  `verify --repair`) while a killed run's replacement is pending: its manifest may be the old
  one over a mix of old and new shards, or missing."""
  from beam_tfrecord.finalize import output as outputs
  if files.exists(paths.join(output, outputs.JOURNAL), strict=True):
    raise outputs.IncompleteOutput(
        f"{output}: a run was interrupted while replacing the output; run `beam-tfrecord "
        f"verify --repair {output}` (or the next convert) to complete it")
  return outputs.load_manifest(output)


def shard_paths(output: str, manifest: Union[Manifest, Mapping],
                split: str) -> List[Tuple[str, Optional[int]]]:
  """(uri, examples or None when unknown) of each shard of a split, in order."""
  manifest = Manifest.of(manifest)
  if split not in manifest.splits:
    raise KeyError(f"split {split!r} not in {output}; it has {sorted(manifest.splits)}")
  return [(paths.join(output, s.path), s.examples) for s in manifest.splits[split].shards]


def read_records(uri: str, limit: Optional[int] = None) -> Iterator[bytes]:
  """The records of one TFRecord file (CRC-checked), on any file system."""
  with files.open_read(uri) as f:
    count = 0
    while limit is None or count < limit:
      record = tfrecord.read_record(f)
      if record is None:
        return
      count += 1
      yield record


# ---------------------------------------------------------------------------------------------
# One record as a picture's ingredients
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Item:
  """What one record shows: its image, boxes in pixels with class names, masks, a caption."""
  image: bytes
  name: str
  group: str                                  # the image this record belongs to
  width: Optional[int] = None
  height: Optional[int] = None
  depth: Optional[int] = None
  boxes: List[Tuple[float, float, float, float]] = dataclasses.field(default_factory=list)
  labels: List[str] = dataclasses.field(default_factory=list)   # one per box
  masks: List[bytes] = dataclasses.field(default_factory=list)
  caption: Optional[str] = None               # the class of a classification record

  def size(self) -> Tuple[int, int]:
    """(width, height): from the record, else from the image header."""
    if self.width and self.height:
      return self.width, self.height
    from beam_tfrecord.write import images
    info = images.probe(self.image)
    self.width, self.height = info.width, info.height
    return self.width, self.height


def class_names(manifest: Union[Manifest, Mapping]) -> Dict[int, str]:
  """{id: name} from the manifest's label map."""
  return {int(i): name for name, i in Manifest.of(manifest).label_map.items()}


def _first(values: Sequence, default=None):
  return values[0] if values else default


def _text(value) -> str:
  return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def item(features: Mapping[str, list], view: View, names: Mapping[int, str],
         record_id: str = "") -> Item:
  """The Item of one parsed record (see parse) read through a View. Its image is the record's
  group id, else its file name, else record_id (a schema with neither: one image a record)."""
  get = lambda key: features.get(key, []) if key else []  # noqa: E731
  ids = [int(i) for i in get(view.class_id)]
  texts = [_text(t) for t in get(view.class_text)]
  labels = texts if texts else [names.get(i, str(i)) for i in ids]
  name = _text(_first(get(view.filename), ""))
  result = Item(image=_first(get(view.image), b""), name=name,
                group=_text(_first(get(view.group), name or record_id)),
                width=_first(get(view.width)), height=_first(get(view.height)),
                depth=_first(get(view.depth)), masks=list(get(view.mask)))
  if view.classification:
    result.caption = _first(labels)
    return result
  if view.box_format == NORMALIZED_CORNERS:
    width, height = result.size()
    xmin, ymin, xmax, ymax = (get(k) for k in view.boxes)
    result.boxes = [(x0 * width, y0 * height, x1 * width, y1 * height)
                    for x0, y0, x1, y1 in zip(xmin, ymin, xmax, ymax)]
  elif view.box_format == NORMALIZED_YXYX:
    width, height = result.size()
    values = list(get(view.boxes[0]))
    result.boxes = [(x0 * width, y0 * height, x1 * width, y1 * height)
                    for y0, x0, y1, x1 in zip(*[iter(values)] * 4)]
  else:  # PIXEL_XYWH: one box per record, four numbers
    values = list(get(view.boxes[0]))
    result.boxes = [(x, y, x + w, y + h) for x, y, w, h in zip(*[iter(values)] * 4)]
  result.labels = (labels + [""] * len(result.boxes))[:len(result.boxes)]
  return result


def to_pil(entry: Item):
  """The record's image as an RGB PIL image: encoded bytes, or raw uint8 pixels of
  height x width x depth (what some writers put in the tutorial's `image_raw`)."""
  from PIL import Image
  try:
    with Image.open(io.BytesIO(entry.image)) as im:
      return im.convert("RGB")
  except Exception:
    w, h, d = entry.width, entry.height, entry.depth or 3
    if not (w and h) or len(entry.image) != w * h * d or d not in (1, 3, 4):
      raise ValueError(f"{entry.name or entry.group}: image bytes are neither an encoded image "
                       f"nor {w}x{h}x{d} raw pixels") from None
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[d]
    return Image.frombytes(mode, (w, h), entry.image).convert("RGB")

"""How to read each schema's records for pictures, statistics and the dataset card.

One row per schema says which feature holds the image, its size, the boxes (and in which
form), the class names or ids, masks and the file name. `show`, `inspect` and the card read
every output through `resolve(manifest)`, which applies the output's feature renames and keeps
only the keys the manifest declares, so a new schema is one row in VIEWS, not new code.
Records are parsed with the protobuf classes in protos.py: no TensorFlow import.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from beam_tfrecord.records import protos
from beam_tfrecord.records import tfrecord
from beam_tfrecord.storage import files, paths

# Box encodings: corners normalized to [0, 1] (TF OD API) or COCO's [x, y, w, h] in pixels.
NORMALIZED_CORNERS = "normalized_corners"
PIXEL_XYWH = "pixel_xywh"
NORMALIZED_YXYX = "normalized_yxyx"  # TFDS's BBoxFeature: [ymin, xmin, ymax, xmax] per object


@dataclasses.dataclass(frozen=True)
class View:
  """Feature keys of one schema by role; None where the schema (or this output) lacks one."""
  schema: str
  image: str                                # encoded image bytes (or raw pixels, see to_pil)
  height: Optional[str] = None
  width: Optional[str] = None
  depth: Optional[str] = None
  filename: Optional[str] = None
  group: Optional[str] = None               # id shared by the records of one image
  boxes: Tuple[str, ...] = ()               # xmin, ymin, xmax, ymax keys, or one [x,y,w,h] key
  box_format: Optional[str] = None
  class_text: Optional[str] = None
  class_id: Optional[str] = None
  mask: Optional[str] = None                # PNG per object, image-sized (TF OD API)

  @property
  def classification(self) -> bool:
    """One class per record and no box: the class is a caption, not a box label."""
    return not self.boxes


VIEWS: Dict[str, View] = {v.schema: v for v in (
    View("od_api", image="image/encoded", height="image/height", width="image/width",
         filename="image/filename",
         boxes=("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax",
                "image/object/bbox/ymax"), box_format=NORMALIZED_CORNERS,
         class_text="image/object/class/text", class_id="image/object/class/label",
         mask="image/object/mask"),
    View("classification", image="image/encoded", height="image/height", width="image/width",
         filename="image/filename", class_text="image/class/text", class_id="image/class/label"),
    # The TFRecord tutorial's keys (tensorflow.org/tutorials/load_data/tfrecord).
    View("tutorial", image="image_raw", height="height", width="width", depth="depth",
         class_id="label"),
    # One record per object, the keras.io "Creating TFRecords" COCO example's keys.
    View("coco-objects", image="image", filename="path", group="image_id", boxes=("bbox",),
         box_format=PIXEL_XYWH, class_id="category_id"),
    # --layout tfds: TFDS coco/2017's and image_folder's features (names in labels.txt)
    View("tfds_detection", image="image", filename="image/filename", boxes=("objects/bbox",),
         box_format=NORMALIZED_YXYX, class_id="objects/label", mask="objects/segmentation"),
    View("tfds_image_folder", image="image", filename="image/filename", class_id="label"),
)}


def renames(manifest: Mapping) -> Dict[str, str]:
  """{schema key: key written}: the manifest's `feature_names` (a dict or an OLD=NEW list),
  else the run's --feature-names as its config records it ('OLD=NEW,...', what the pipeline
  writes)."""
  given = manifest.get("feature_names") or (manifest.get("config") or {}).get(
      "feature_names") or {}
  if isinstance(given, Mapping):
    return {str(k): str(v) for k, v in given.items()}
  if isinstance(given, str):
    given = given.split(",")
  pairs = (str(item).split("=", 1) for item in given if "=" in str(item))
  return {old.strip(): new.strip() for old, new in pairs}


def resolve(manifest: Mapping) -> View:
  """The manifest's schema row, with renamed keys; roles whose key this output lacks are None.

  An unknown schema name is matched by its features: the row whose image key it declares."""
  features = manifest.get("features") or {}
  rename = renames(manifest)
  name = str(manifest.get("schema", "od_api"))
  row = VIEWS.get(name) or VIEWS.get(name.replace("_", "-")) or VIEWS.get(name.replace("-", "_"))
  if row is None:
    rows = [v for v in VIEWS.values() if rename.get(v.image, v.image) in features]
    if not rows:
      raise ValueError(f"schema {name!r}: none of its features is an image this tool knows "
                       f"({', '.join(sorted(features)) or 'no features'}); known schemas: "
                       f"{', '.join(VIEWS)}")
    row = max(rows, key=lambda v: sum(rename.get(k, k) in features for k in _keys(v)))

  def key(k: Optional[str]) -> Optional[str]:
    if k is None:
      return None
    k = rename.get(k, k)
    return k if k in features else None

  changes = {f.name: key(getattr(row, f.name)) for f in dataclasses.fields(View)
             if f.name not in ("schema", "boxes", "box_format")}
  box_keys = tuple(rename.get(k, k) for k in row.boxes)
  if not all(k in features for k in box_keys):
    box_keys = ()
  if changes["image"] is None:
    raise ValueError(f"output of schema {name!r} declares no image feature "
                     f"{rename.get(row.image, row.image)!r}")
  return dataclasses.replace(row, schema=name, boxes=box_keys,
                             box_format=row.box_format if box_keys else None, **changes)


def _keys(view: View) -> List[str]:
  return [k for k in (view.image, view.height, view.width, view.filename, view.class_text,
                      view.class_id, *view.boxes) if k]


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


def read_manifest(output: str) -> Dict:
  """The manifest of an output to read back. finalize.output.IncompleteOutput (naming
  `verify --repair`) while a killed run's replacement is pending: its manifest may be the old
  one over a mix of old and new shards, or missing."""
  from beam_tfrecord.finalize import output as outputs
  if files.exists(paths.join(output, outputs.JOURNAL), strict=True):
    raise outputs.IncompleteOutput(
        f"{output}: a run was interrupted while replacing the output; run `beam-tfrecord "
        f"verify --repair {output}` (or the next convert) to complete it")
  return outputs.read_manifest(output)


def shard_paths(output: str, manifest: Mapping, split: str) -> List[Tuple[str, Optional[int]]]:
  """(uri, examples or None when unknown) of each shard of a split, in order."""
  if split not in manifest["splits"]:
    raise KeyError(f"split {split!r} not in {output}; it has {sorted(manifest['splits'])}")
  return [(paths.join(output, s["path"]), s.get("examples"))
          for s in manifest["splits"][split]["shards"]]


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


def class_names(manifest: Mapping) -> Dict[int, str]:
  """{id: name} from the manifest's label map."""
  return {int(i): name for name, i in (manifest.get("label_map") or {}).items()}


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

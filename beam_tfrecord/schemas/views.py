"""How to read each schema's records by role: which feature holds the image, its size, the
boxes (and in which form), the class names or ids, masks and the file name. `show`, `inspect`
and the dataset card read every output through `resolve(manifest)`, which applies the output's
feature renames and keeps only the keys the manifest declares, so a new schema is one row in
VIEWS, not new code. Pure: readback/ reads the records, finalize/card writes the snippet.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Tuple, Union

from beam_tfrecord.records.manifest import Manifest

# Box encodings: corners normalized to [0, 1] (TF OD API) or COCO's [x, y, w, h] in pixels.
NORMALIZED_CORNERS = "normalized_corners"
PIXEL_XYWH = "pixel_xywh"
NORMALIZED_YXYX = "normalized_yxyx"  # TFDS's BBoxFeature: [ymin, xmin, ymax, xmax] per object
# Keypoint encodings, normalized like the boxes: the TF OD API's x and y keys (K per object,
# flattened), TFDS's one key of [y, x] pairs.
KEYPOINTS_X_Y = "keypoints_x_y"
KEYPOINTS_YX = "keypoints_yx"


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
  class_mask: Optional[str] = None          # one PNG of class ids per image (deeplab)
  keypoints: Tuple[str, ...] = ()           # x and y keys, or one [y, x] pairs key
  keypoint_format: Optional[str] = None
  keypoint_visibility: Optional[str] = None  # 0 not labelled, 1 occluded, 2 visible

  @property
  def classification(self) -> bool:
    """One class per record and no box: the class is a caption, not a box label."""
    return not self.boxes and not self.class_mask


VIEWS: Dict[str, View] = {v.schema: v for v in (
    View("od_api", image="image/encoded", height="image/height", width="image/width",
         filename="image/filename",
         boxes=("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax",
                "image/object/bbox/ymax"), box_format=NORMALIZED_CORNERS,
         class_text="image/object/class/text", class_id="image/object/class/label",
         mask="image/object/mask",
         keypoints=("image/object/keypoint/x", "image/object/keypoint/y"),
         keypoint_format=KEYPOINTS_X_Y, keypoint_visibility="image/object/keypoint/visibility"),
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
         box_format=NORMALIZED_YXYX, class_id="objects/label", mask="objects/segmentation",
         keypoints=("objects/keypoints",), keypoint_format=KEYPOINTS_YX,
         keypoint_visibility="objects/keypoint_visibility"),
    View("tfds_image_folder", image="image", filename="image/filename", class_id="label"),
    # DeepLab's build_data.py keys: the classes are the class mask's values
    View("deeplab", image="image/encoded", height="image/height", width="image/width",
         filename="image/filename", class_mask="image/segmentation/class/encoded"),
)}


def renames(manifest: Union[Manifest, Mapping]) -> Dict[str, str]:
  """{schema key: key written}: the manifest's `feature_names` (a dict or an OLD=NEW list),
  else the run's --feature-names as its config records it ('OLD=NEW,...', what the pipeline
  writes)."""
  manifest = Manifest.of(manifest)
  given = manifest.extra.get("feature_names") or manifest.setting("feature_names") or {}
  if isinstance(given, Mapping):
    return {str(k): str(v) for k, v in given.items()}
  if isinstance(given, str):
    given = given.split(",")
  pairs = (str(item).split("=", 1) for item in given if "=" in str(item))
  return {old.strip(): new.strip() for old, new in pairs}


def resolve(manifest: Union[Manifest, Mapping]) -> View:
  """The manifest's schema row, with renamed keys; roles whose key this output lacks are None.

  An unknown schema name is matched by its features: the row whose image key it declares."""
  manifest = Manifest.of(manifest)
  features = manifest.features
  rename = renames(manifest)
  name = manifest.schema
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
             if f.name not in ("schema", "boxes", "box_format", "keypoints", "keypoint_format")}
  box_keys = tuple(rename.get(k, k) for k in row.boxes)
  if not all(k in features for k in box_keys):
    box_keys = ()
  point_keys = tuple(rename.get(k, k) for k in row.keypoints)
  if not (box_keys and all(k in features for k in point_keys)):  # points belong to boxes
    point_keys = ()
  if changes["image"] is None:
    raise ValueError(f"output of schema {name!r} declares no image feature "
                     f"{rename.get(row.image, row.image)!r}")
  return dataclasses.replace(row, schema=name, boxes=box_keys,
                             box_format=row.box_format if box_keys else None,
                             keypoints=point_keys,
                             keypoint_format=row.keypoint_format if point_keys else None,
                             **changes)


def _keys(view: View) -> List[str]:
  return [k for k in (view.image, view.height, view.width, view.filename, view.class_text,
                      view.class_id, view.class_mask, *view.boxes) if k]

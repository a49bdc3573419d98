"""LabelMe layouts, from the generated sample dataset (conftest), as labelme writes them.

Looked up (read, not copied): wkentaro/labelme's `labelme/_label_file.py` (LabelFile.save:
`version, flags, shapes, imagePath, imageData, imageHeight, imageWidth` in that order,
json.dump(indent=2, ensure_ascii=False); imagePath is osp.relpath(image, the JSON's folder);
imageData base64 unless --nodata), app.py's saveLabels/format_shape (a shape's keys: 5.x
`label, points, group_id, description, shape_type, flags, mask`; 4.x without description and
mask; 3.x `label, line_color, fill_color, points, shape_type, flags` and top-level
`lineColor`/`fillColor` after `shapes`), the examples/bbox_detection/data_annotated/*.json
files (4.0.0: rectangle points as two [x, y] float lists, group_id null), Supervisely's
LabelMe import page (a 5.5.0 file with description "" and mask null) and labelme2coco.py
(group_id shapes merged into one instance, `__ignore__` not a class).

Sample boxes (label, x0, y0, x1, y1) become shapes so that every object's bounding box is the
box again: rectangles, every other one with its corners in the order of a drag from the
bottom-right (labelme keeps the drag order); with `polygons`, every third box a diamond
touching the box's four sides; with `groups`, every box after the first of an image with two
or more boxes split into two rectangles (left and right halves) sharing a group_id.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from beam_tfrecord import sample

VERSIONS = ("3.16.7", "4.6.0", "5.5.0")


def _shape(version: str, label: str, points: List[List[float]], shape_type: str,
           group_id: Optional[int] = None) -> Dict:
  """One shape with the keys (and key order) labelme `version` writes."""
  major = int(version.split(".")[0])
  if major < 4:  # 3.x: colours per shape, no group_id
    return {"label": label, "line_color": None, "fill_color": None, "points": points,
            "shape_type": shape_type, "flags": {}}
  if major < 5:
    return {"label": label, "points": points, "group_id": group_id, "shape_type": shape_type,
            "flags": {}}
  return {"label": label, "points": points, "group_id": group_id, "description": "",
          "shape_type": shape_type, "flags": {}, "mask": None}


def diamond(x0: float, y0: float, x1: float, y1: float) -> List[List[float]]:
  """A polygon touching the four sides of a box (its bounding box is the box)."""
  cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
  return [[cx, y0], [x1, cy], [cx, y1], [x0, cy]]


def shapes_for(im: sample.SampleImage, version: str = "5.5.0", polygons: bool = False,
               groups: bool = False) -> List[Dict]:
  """The shapes of one sample image (see the module docstring for the rules)."""
  shapes = []
  grouped = groups and int(version.split(".")[0]) >= 4 and len(im.boxes) >= 2
  for i, (label, x0, y0, x1, y1) in enumerate(im.boxes):
    x0, y0, x1, y1 = (float(v) for v in (x0, y0, x1, y1))
    if grouped and i >= 1:
      mid = (x0 + x1) / 2
      shapes.append(_shape(version, label, [[x0, y0], [mid, y1]], "rectangle", i))
      shapes.append(_shape(version, label, [[mid, y0], [x1, y1]], "rectangle", i))
    elif polygons and i % 3 == 2:
      shapes.append(_shape(version, label, diamond(x0, y0, x1, y1), "polygon"))
    elif i % 2:
      shapes.append(_shape(version, label, [[x1, y1], [x0, y0]], "rectangle"))
    else:
      shapes.append(_shape(version, label, [[x0, y0], [x1, y1]], "rectangle"))
  return shapes


def labelme_json(im: sample.SampleImage, image_path: str, shapes: Sequence[Dict],
                 version: str = "5.5.0", image_data: Optional[bytes] = None) -> str:
  """A LabelMe file's text, keys in labelme's order, indent=2, non-ASCII kept."""
  doc: Dict = {"version": version, "flags": {}, "shapes": list(shapes)}
  if int(version.split(".")[0]) < 4:
    doc.update(lineColor=[0, 255, 0, 128], fillColor=[255, 0, 0, 128])
  doc.update(imagePath=image_path,
             imageData=base64.b64encode(image_data).decode("utf-8") if image_data else None,
             imageHeight=im.height, imageWidth=im.width)
  return json.dumps(doc, ensure_ascii=False, indent=2)


def stem(name: str) -> str:
  return os.path.splitext(name)[0]


def write_labelme(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
                  version: str = "5.5.0", layout: str = "beside", polygons: bool = False,
                  groups: bool = False, image_data: bool = False) -> Path:
  """A LabelMe dataset under target; returns the folder to give as --input.

  layout 'beside': target/<split>/IMAGE + IMAGE.json (labelme's default: the JSON saved next
  to the image, imagePath the bare name), returns target. 'side_by_side': target/images/ and
  target/annotations/ (an output dir chosen in labelme: imagePath `../images/NAME`), returns
  target. 'windows': like 'beside' but imagePath written by labelme on Windows with a
  sub-folder (`.\\NAME` style backslashes). image_data: imageData holds the image (labelme's
  default store_data), else null (--nodata)."""
  for im in images:
    data = (image_dir / im.file_name).read_bytes()
    if layout == "side_by_side":
      image_at, json_at = target / "images", target / "annotations"
      image_path = f"../images/{im.file_name}"
    elif layout in ("beside", "windows"):
      image_at = json_at = target / im.split
      image_path = im.file_name if layout == "beside" else f"..\\{im.split}\\{im.file_name}"
    else:
      raise ValueError(layout)
    image_at.mkdir(parents=True, exist_ok=True)
    json_at.mkdir(parents=True, exist_ok=True)
    shutil.copy(image_dir / im.file_name, image_at / im.file_name)
    (json_at / f"{stem(im.file_name)}.json").write_text(
        labelme_json(im, image_path, shapes_for(im, version, polygons, groups), version,
                     data if image_data else None), encoding="utf-8")
  return target


def label_ids(images: Sequence[sample.SampleImage]) -> Dict[str, int]:
  """Sorted class names -> 1..N (what a source without categories gets)."""
  names = sorted({b[0] for im in images for b in im.boxes})
  return {name: i for i, name in enumerate(names, start=1)}

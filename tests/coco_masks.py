"""A COCO instances file with every kind of segmentation, laid out like COCO's own: polygons
(one object in two parts), a crowd region as uncompressed RLE, a compressed RLE string, an object
whose segmentation is broken and one without any. Converted by tests/write/test_masks.py (masks
compared with pycocotools) and tests/schemas/test_tutorial_and_coco_objects.py (per object)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

W, H = 64, 48


def _rle(mask: np.ndarray, compressed: bool) -> dict:
  """A mask as COCO RLE: compressed (a string) or uncompressed (counts list, COCO's crowds)."""
  from pycocotools import mask as coco_mask
  if compressed:
    rle = coco_mask.encode(np.asfortranarray(mask))
    return {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
  flat = mask.flatten(order="F")  # COCO runs go down columns, starting with zeros
  counts, value, run = [], 0, 0
  for pixel in flat:
    if pixel != value:
      counts.append(run)
      value, run = pixel, 0
    run += 1
  counts.append(run)
  return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": counts}


def _coco_fields(segmentation, width, height) -> dict:
  """area and bbox as COCO computes them (pycocotools)."""
  from pycocotools import mask as coco_mask
  if isinstance(segmentation, dict):
    rle = (coco_mask.frPyObjects(segmentation, height, width)
           if isinstance(segmentation["counts"], list) else
           {"size": segmentation["size"], "counts": segmentation["counts"].encode()})
  else:
    rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
  return {"area": float(coco_mask.area(rle)), "bbox": [float(v) for v in coco_mask.toBbox(rle)]}


def make_coco(root: Path) -> Path:
  """Two images (JPEG, PNG) and their instances JSON with every kind of segmentation."""
  images_dir = root / "images"
  images_dir.mkdir(parents=True)
  photo = Image.new("RGB", (W, H), (30, 30, 30))
  draw = ImageDraw.Draw(photo)
  draw.polygon([(5, 5), (25, 5), (15, 30)], fill=(200, 0, 0))
  draw.rectangle([40, 10, 55, 40], fill=(0, 200, 0))
  photo.save(images_dir / "a.jpg", quality=90)
  Image.new("RGB", (W, H), (0, 0, 90)).save(images_dir / "b.png")

  crowd = np.zeros((H, W), np.uint8)
  crowd[20:40, 2:30] = 1
  blob = np.zeros((H, W), np.uint8)
  blob[5:15, 40:60] = 1
  blob[30:44, 50:58] = 1
  segs = [
      (1, [[5, 5, 25, 5, 15, 30]], 0),                                    # polygon
      (1, [[40, 10, 55.5, 10, 55.5, 40.5, 40, 40.5], [2, 40, 8, 40, 5, 46]], 0),  # two parts
      (2, _rle(crowd, compressed=False), 1),                              # crowd, uncompressed
      (2, _rle(blob, compressed=True), 0),                                # compressed RLE
      (2, [[1, 2, 3, 4]], 0),                                             # too few points
      (2, None, 0),                                                       # no segmentation
  ]
  annotations = []
  for ann_id, (image_id, seg, crowd_flag) in enumerate(segs, start=101):
    ann = {"id": ann_id, "image_id": image_id, "category_id": 3 if crowd_flag else 7,
           "iscrowd": crowd_flag}
    if seg is not None:
      ann["segmentation"] = seg
    if seg is not None and ann_id != 105:
      ann.update(_coco_fields(seg, W, H))
    else:
      ann.update({"area": 4.0, "bbox": [1.0, 2.0, 2.0, 2.0]})
    annotations.append(ann)
  doc = {"info": {"description": "mask fixture"}, "licenses": [],
         "images": [{"id": 1, "file_name": "a.jpg", "width": W, "height": H},
                    {"id": 2, "file_name": "b.png", "width": W, "height": H}],
         "annotations": annotations,
         "categories": [{"id": 3, "name": "people", "supercategory": "x"},
                        {"id": 7, "name": "shape", "supercategory": "x"}]}
  path = root / "instances_train.json"
  path.write_text(json.dumps(doc), encoding="utf-8")
  return path

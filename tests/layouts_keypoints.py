"""Keypoint datasets written the way their tools write them, with what each point should read
back as.

- COCO person_keypoints_*.json: the official files' layout (key order info, licenses, images,
  annotations, categories; an annotation's segmentation, num_keypoints, area, iscrowd,
  keypoints [x, y, v] * 17, image_id, bbox, category_id, id; the person category's 17
  `keypoints` names and 1-based `skeleton`), cocodataset.org's format page (v=0: not labelled,
  x = y = 0). A non-person category without keypoints, as in exports of several categories.
- Ultralytics YOLO pose: data.yaml with `kpt_shape: [K, 3]` (or [K, 2]), `flip_idx`, `names`
  and `kpt_names` (ultralytics/cfg/datasets/coco8-pose.yaml), label lines
  `class cx cy w h x y v ...` written with '%g' as ultralytics' COCO converter writes them.
- CVAT for images 1.1 skeletons: a <label> of type skeleton with its <svg> (a circle per
  point with data-node-id and data-label-name, a line per edge with data-node-from/to) and one
  <label> per point with its <parent>, as CVAT's bindings write the meta; each skeleton an
  <skeleton label source z_order> holding <points label source outside occluded points>
  (cvat/apps/dataset_manager/formats/cvat.py, dump_labeled_shapes).
"""
from __future__ import annotations

import json
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from PIL import Image

import layouts_cvat

COCO_KEYPOINTS = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder",
                  "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist",
                  "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
                  "right_ankle")
COCO_SKELETON = [[16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7],
                 [6, 8], [7, 9], [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5],
                 [4, 6], [5, 7]]
SIZES = ((96, 64), (80, 80), (64, 96), (72, 54), (90, 60))


@dataclass
class Obj:
  """One object as its source gives it: class, box (x0, y0, x1, y1 in pixels) and its
  points [(x, y, v)] in pixels (None: the object has none)."""
  label: str
  box: Tuple[float, float, float, float]
  points: Optional[List[Tuple[float, float, int]]] = None


@dataclass
class Img:
  name: str
  split: str
  width: int
  height: int
  objects: List[Obj] = field(default_factory=list)


def _jpeg(path: Path, width: int, height: int, seed: int) -> None:
  rng = random.Random(seed)
  image = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
  image.save(path, "JPEG", quality=90)


def _points(rng: random.Random, box, count: int, unlabelled_at_zero: bool = True):
  x0, y0, x1, y1 = box
  points = []
  for _ in range(count):
    v = rng.choice((0, 1, 2, 2))
    points.append((0, 0, 0) if v == 0 and unlabelled_at_zero else
                  (rng.randint(int(x0), int(x1)), rng.randint(int(y0), int(y1)), v))
  return points


def make_images(root: Path, count: int = 5, seed: int = 31, keypoints: int = 17,
                other: str = "dog") -> List[Img]:
  """`count` JPEGs under root/images and their objects: one or two persons with `keypoints`
  points each (every visibility), an `other` object without any on every other image, and a
  last image with no object."""
  rng = random.Random(seed)
  (root / "images").mkdir(parents=True, exist_ok=True)
  images = []
  for i in range(count):
    width, height = SIZES[i % len(SIZES)]
    img = Img(f"img_{i:02d}.jpg", "val" if i == count - 2 else "train", width, height)
    _jpeg(root / "images" / img.name, width, height, seed + i)
    if i < count - 1:
      for _ in range(1 + i % 2):
        box = (rng.randint(0, width // 3), rng.randint(0, height // 3),
               rng.randint(width // 2, width - 1), rng.randint(height // 2, height - 1))
        img.objects.append(Obj("person", box, _points(rng, box, keypoints)))
      if i % 2 == 0 and other:
        img.objects.append(Obj(other, (2, 3, width // 2, height // 2)))
    images.append(img)
  return images


def write_coco(root: Path, images: Sequence[Img], split: str,
               keypoint_values=None) -> Path:
  """person_keypoints_<split>.json of the images of `split`. keypoint_values(obj) may replace
  an object's `keypoints` list (bad input)."""
  entries, annotations = [], []
  for image_id, img in enumerate(images, start=1):
    if img.split != split:
      continue
    entries.append(OrderedDict([("license", 1), ("file_name", img.name),
                                ("coco_url", f"http://images.cocodataset.org/{img.name}"),
                                ("height", img.height), ("width", img.width),
                                ("date_captured", "2013-11-14 16:28:13"),
                                ("flickr_url", ""), ("id", image_id)]))
    for obj in img.objects:
      x0, y0, x1, y1 = obj.box
      ann = OrderedDict([("segmentation", [[x0, y0, x1, y0, x1, y1, x0, y1]])])
      if obj.points is not None:
        ann["num_keypoints"] = sum(1 for p in obj.points if p[2])
      ann.update([("area", float((x1 - x0) * (y1 - y0))), ("iscrowd", 0)])
      if obj.points is not None:
        flat = [v for p in obj.points for v in p]
        ann["keypoints"] = keypoint_values(obj, flat) if keypoint_values else flat
      ann.update([("image_id", image_id), ("bbox", [x0, y0, x1 - x0, y1 - y0]),
                  ("category_id", 1 if obj.label == "person" else 18),
                  ("id", 1000 * image_id + len(annotations))])
      annotations.append(ann)
  doc = OrderedDict([
      ("info", {"description": "COCO 2017 Dataset", "version": "1.0", "year": 2017}),
      ("licenses", [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/", "id": 1,
                     "name": "Attribution-NonCommercial-ShareAlike License"}]),
      ("images", entries), ("annotations", annotations),
      ("categories", [OrderedDict([("supercategory", "person"), ("id", 1), ("name", "person"),
                                   ("keypoints", list(COCO_KEYPOINTS)),
                                   ("skeleton", COCO_SKELETON)]),
                      OrderedDict([("supercategory", "animal"), ("id", 18),
                                   ("name", "dog")])])])
  path = root / f"person_keypoints_{split}.json"
  path.write_text(json.dumps(doc))
  return path


def write_datumaro_coco(root: Path, images: Sequence[Img], skeleton: Sequence[Sequence[int]],
                        split: str = "train") -> Path:
  """annotations/person_keypoints_default.json as Datumaro's COCO converter (CVAT's COCO
  Keypoints export) writes it: info and licenses with empty values, images with license 0,
  annotations with `attributes` and `keypoints` before `num_keypoints`, categories with
  supercategory '' and the `skeleton` given (Datumaro's joints, 0-based). The non-person
  category has empty keypoint and skeleton lists."""
  entries, annotations = [], []
  for image_id, img in enumerate(images, start=1):
    if img.split != split:
      continue
    entries.append({"id": image_id, "width": img.width, "height": img.height,
                    "file_name": img.name, "license": 0, "flickr_url": "", "coco_url": "",
                    "date_captured": 0})
    for obj in img.objects:
      x0, y0, x1, y1 = obj.box
      ann = {"id": len(annotations) + 1, "image_id": image_id,
             "category_id": 1 if obj.label == "person" else 2, "segmentation": [],
             "area": float((x1 - x0) * (y1 - y0)), "bbox": [x0, y0, x1 - x0, y1 - y0],
             "iscrowd": 0, "attributes": {"occluded": False}}
      if obj.points is not None:
        ann["keypoints"] = [v for p in obj.points for v in p]
        ann["num_keypoints"] = sum(1 for p in obj.points if p[2])
      annotations.append(ann)
  doc = {"licenses": [{"name": "", "id": 0, "url": ""}],
         "info": {"contributor": "", "date_created": "", "description": "", "url": "",
                  "version": "", "year": ""},
         "categories": [{"id": 1, "name": "person", "supercategory": "",
                         "keypoints": list(COCO_KEYPOINTS),
                         "skeleton": [list(e) for e in skeleton]},
                        {"id": 2, "name": "dog", "supercategory": "", "keypoints": [],
                         "skeleton": []}],
         "images": entries, "annotations": annotations}
  path = root / "annotations" / "person_keypoints_default.json"
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(doc))
  return path


def write_yolo_pose(root: Path, images: Sequence[Img], dims: int = 3,
                    names: Sequence[str] = COCO_KEYPOINTS, kpt_names: bool = True,
                    classes: Sequence[str] = ("person", "dog")) -> Path:
  """An Ultralytics pose dataset of the images (moved under images/<split>/), every object a
  pose line (an object without points: K points 0 0 0, as ultralytics' converter writes
  annotations without keypoints)."""
  for split in sorted({img.split for img in images}):
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    (root / "labels" / split).mkdir(parents=True, exist_ok=True)
  for img in images:
    (root / "images" / img.name).rename(root / "images" / img.split / img.name)
    lines = []
    for obj in img.objects:
      x0, y0, x1, y1 = obj.box
      line = [classes.index(obj.label), (x0 + x1) / 2 / img.width,
              (y0 + y1) / 2 / img.height, (x1 - x0) / img.width, (y1 - y0) / img.height]
      for x, y, v in obj.points or [(0, 0, 0)] * len(names):
        line += [x / img.width, y / img.height] + ([v] if dims == 3 else [])
      lines.append(("%g " * len(line)).rstrip() % tuple(line))
    (root / "labels" / img.split / (img.name[:-4] + ".txt")).write_text(
        "".join(line + "\n" for line in lines))
  flip = list(range(len(names)))
  text = (f"path: {root}\ntrain: images/train\nval: images/val\ntest:\n\n# Keypoints\n"
          f"kpt_shape: [{len(names)}, {dims}]\nflip_idx: {flip}\n\n# Classes\nnames:\n" +
          "".join(f"  {i}: {c}\n" for i, c in enumerate(classes)))
  if kpt_names:
    text += "\nkpt_names:\n" + "".join(
        f"  {i}:\n" + "".join(f"    - {n}\n" for n in names) for i in range(len(classes)))
  path = root / "data.yaml"
  path.write_text(text)
  return path


def _svg(names: Sequence[str], edges: Sequence[Tuple[int, int]]) -> str:
  """A skeleton's svg as CVAT's label constructor stores it: edges first, then the nodes."""
  lines = "".join(f'<line x1="1" y1="1" x2="2" y2="2" stroke="black" data-type="edge" '
                  f'data-node-from="{a + 1}" stroke-width="0.5" data-node-to="{b + 1}"></line>'
                  for a, b in edges)
  circles = "".join(f'<circle r="1.5" stroke="black" fill="#b3b3b3" cx="{i}" cy="{i}" '
                    f'stroke-width="0.1" data-type="element node" data-element-id="{i + 1}" '
                    f'data-node-id="{i + 1}" data-label-name="{n}"></circle>'
                    for i, n in enumerate(names))
  return lines + circles


def write_cvat_skeletons(root: Path, images: Sequence[Img], names: Sequence[str],
                         edges: Sequence[Tuple[int, int]], other: str = "car",
                         element=None) -> Path:
  """annotations.xml (a task) beside images/: each person a <skeleton> (outside="1" for an
  unlabelled point, occluded="1" for v=1), each other object a <box>. element(img, obj, attrs)
  may change a point's attributes (bad input)."""
  labels = [("label", OrderedDict([("name", "person"), ("color", "#fa3253"),
                                   ("type", "skeleton"), ("attributes", []),
                                   ("svg", _svg(names, edges))]))]
  labels += [("label", OrderedDict([("name", n), ("color", "#33ddff"), ("type", "points"),
                                    ("attributes", []), ("parent", "person")])) for n in names]
  labels += [("label", OrderedDict([("name", other), ("color", "#ff6037"),
                                    ("type", "rectangle"), ("attributes", [])]))]
  task = layouts_cvat._task(1, "poses", len(images), "default")
  task["labels"] = labels
  meta = OrderedDict([("task", task), ("dumped", "2026-11-23 10:00:00.000000+00:00")])
  path = root / "annotations.xml"
  with layouts_cvat.document(path, meta) as w:
    for frame, img in enumerate(images):
      w.open("image", OrderedDict([("id", str(frame)), ("name", img.name),
                                   ("width", str(img.width)), ("height", str(img.height))]))
      for obj in img.objects:
        if obj.points is None:
          w.open("box", layouts_cvat.box_attrs(obj.label, *obj.box))
          w.close("box")
          continue
        w.open("skeleton", OrderedDict([("label", obj.label), ("source", "manual"),
                                        ("z_order", "0")]))
        for name, (x, y, v) in zip(names, obj.points):
          attrs = OrderedDict([("label", name), ("source", "manual"),
                               ("outside", "1" if v == 0 else "0"),
                               ("occluded", "1" if v == 1 else "0"),
                               ("points", f"{x:.2f},{y:.2f}")])
          if element is not None:
            attrs = element(img, obj, attrs)
          if attrs is not None:
            w.open("points", attrs)
            w.close("points")
        w.close("skeleton")
      w.close("image")
  return path


def expected_points(img: Img, obj: Obj, size: int) -> Optional[List[Tuple[float, float, int]]]:
  """(x, y, v) normalized as the records should hold them: unlabelled at 0, 0, 0; an object
  without points K unlabelled ones."""
  points = obj.points if obj.points is not None else [(0, 0, 0)] * size
  return [(x / img.width, y / img.height, v) if v else (0.0, 0.0, 0) for x, y, v in points]


def by_name(images: Sequence[Img]) -> Dict[str, Img]:
  return {img.name: img for img in images}

"""A small, real sample dataset written in COCO, Pascal VOC and TF OD CSV form at once.

Used by the demo command and the tests: real JPEG and PNG files made with Pillow, 0-4 boxes
per image, the same annotations in all three formats, and the expected values returned.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import random
from typing import Dict, List, Sequence, Tuple
from xml.sax.saxutils import escape

from PIL import Image, ImageDraw

CLASSES = ("cat", "dog", "person")
COCO_IDS = {"cat": 17, "dog": 18, "person": 1}  # COCO's own ids: gaps on purpose


@dataclasses.dataclass
class SampleImage:
  file_name: str
  width: int
  height: int
  format: str                 # real format of the bytes
  boxes: List[Tuple[str, float, float, float, float]]  # (class, xmin, ymin, xmax, ymax)
  split: str
  image_id: int


def _draw(width: int, height: int, rng: random.Random, boxes) -> Image.Image:
  image = Image.new("RGB", (width, height),
                    tuple(rng.randrange(256) for _ in range(3)))
  draw = ImageDraw.Draw(image)
  for _, x0, y0, x1, y1 in boxes:
    draw.rectangle([x0, y0, x1, y1], fill=tuple(rng.randrange(256) for _ in range(3)))
  return image


def make_images(root: str, count: int = 12, seed: int = 0,
                splits: Sequence[str] = ("train", "val")) -> List[SampleImage]:
  """Write `count` images under root/images; every 3rd is PNG, one PNG is named .jpg,
  every 5th has no boxes."""
  rng = random.Random(seed)
  os.makedirs(os.path.join(root, "images"), exist_ok=True)
  result = []
  for i in range(count):
    width, height = rng.choice([(320, 240), (240, 320), (200, 150), (256, 256)])
    boxes = []
    if i % 5 != 4:
      for _ in range(rng.randint(1, 4)):
        x0 = round(rng.uniform(0, width * 0.6), 1)
        y0 = round(rng.uniform(0, height * 0.6), 1)
        x1 = round(min(width, x0 + rng.uniform(8, width * 0.4)), 1)
        y1 = round(min(height, y0 + rng.uniform(8, height * 0.4)), 1)
        boxes.append((rng.choice(CLASSES), x0, y0, x1, y1))
    fmt = "png" if i % 3 == 2 or i == 1 else "jpeg"
    ext = "jpg" if (fmt == "jpeg" or i == 1) else "png"
    name = f"img_{i:04d}.{ext}"
    image = _draw(width, height, rng, boxes)
    if fmt == "jpeg":
      image.save(os.path.join(root, "images", name), format="JPEG", quality=90)
    else:
      image.save(os.path.join(root, "images", name), format="PNG")
    result.append(SampleImage(name, width, height, fmt, boxes, splits[i % len(splits)],
                              image_id=1000 + 7 * i))
  return result


def write_coco(root: str, images: Sequence[SampleImage], split: str) -> str:
  path = os.path.join(root, f"instances_{split}.json")
  anns, ann_id = [], 1
  chosen = [im for im in images if im.split == split]
  for im in chosen:
    for label, x0, y0, x1, y1 in im.boxes:
      anns.append({"id": ann_id, "image_id": im.image_id, "category_id": COCO_IDS[label],
                   "bbox": [x0, y0, round(x1 - x0, 4), round(y1 - y0, 4)],
                   "area": round((x1 - x0) * (y1 - y0), 4), "iscrowd": 0})
      ann_id += 1
  doc = {"info": {"description": "beam-tfrecord sample"},
         "images": [{"id": im.image_id, "file_name": im.file_name, "width": im.width,
                     "height": im.height} for im in chosen],
         "annotations": anns,
         "categories": [{"id": i, "name": n, "supercategory": "thing"}
                        for n, i in sorted(COCO_IDS.items(), key=lambda kv: kv[1])]}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False)
  return path


def write_voc(root: str, images: Sequence[SampleImage]) -> str:
  """VOC layout under root/voc: Annotations/*.xml and ImageSets/Main/<split>.txt;
  images stay in root/images (pass it as the image root)."""
  voc = os.path.join(root, "voc")
  os.makedirs(os.path.join(voc, "Annotations"), exist_ok=True)
  os.makedirs(os.path.join(voc, "ImageSets", "Main"), exist_ok=True)
  members: Dict[str, List[str]] = {}
  for im in images:
    stem = os.path.splitext(im.file_name)[0]
    members.setdefault(im.split, []).append(stem)
    objects = "".join(
        f"<object><name>{escape(label)}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>0</difficult><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax>"
        f"<ymax>{y1}</ymax></bndbox></object>" for label, x0, y0, x1, y1 in im.boxes)
    xml = (f"<annotation><folder>elsewhere</folder><filename>{escape(im.file_name)}</filename>"
           f"<path>/home/someone/{escape(im.file_name)}</path><size><width>{im.width}</width>"
           f"<height>{im.height}</height><depth>3</depth></size>{objects}</annotation>")
    with open(os.path.join(voc, "Annotations", stem + ".xml"), "w", encoding="utf-8") as f:
      f.write(xml)
  for split, stems in members.items():
    with open(os.path.join(voc, "ImageSets", "Main", f"{split}.txt"), "w") as f:
      f.write("\n".join(stems) + "\n")
  return voc


def write_csv(root: str, images: Sequence[SampleImage], split: str) -> str:
  """TF OD CSV (xml_to_csv.py layout); images without boxes get a row with empty class/box."""
  path = os.path.join(root, f"{split}_labels.csv")
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["filename", "width", "height", "class", "xmin", "ymin", "xmax", "ymax"])
    for im in images:
      if im.split != split:
        continue
      if not im.boxes:
        writer.writerow([im.file_name, im.width, im.height, "", "", "", "", ""])
      for label, x0, y0, x1, y1 in im.boxes:
        writer.writerow([im.file_name, im.width, im.height, label, x0, y0, x1, y1])
  return path


def make_dataset(root: str, count: int = 12, seed: int = 0) -> List[SampleImage]:
  """Images plus COCO, VOC and CSV annotations of them, all under root."""
  images = make_images(root, count, seed)
  for split in sorted({im.split for im in images}):
    write_coco(root, images, split)
    write_csv(root, images, split)
  write_voc(root, images)
  return images

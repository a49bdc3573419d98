"""keras-yolo3 annotation text, written from the generated sample dataset (conftest).

Mirrors the real writers (looked up, not copied):
- qqwweee/keras-yolo3 voc_annotation.py: run beside VOCdevkit/, it writes `2007_train.txt`,
  `2007_val.txt`, ... one line per image id of ImageSets/Main/<set>.txt:
  `{cwd}/VOCdevkit/VOC2007/JPEGImages/{id}.jpg` (absolute, always .jpg) then for each
  non-difficult object ` xmin,ymin,xmax,ymax,class_id` with int() of the XML's values; a line
  without objects is the path alone. Classes in model_data/voc_classes.txt, one a line, in the
  script's order (not sorted).
- Roboflow's "YOLO Keras TXT" export (roboflow.com/formats/yolo-keras-txt): train/ valid/
  folders holding the images, `_annotations.txt` (`000001.jpg 178,84,230,143,1 ...`, names
  relative to the folder, integer pixels) and `_classes.txt` (the names, sorted, one a line);
  README.roboflow.txt at the top. An image without boxes is written as its name alone.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path
from typing import Dict, List, Sequence

import layouts

from beam_tfrecord import sample

# voc_classes.txt's order is the script's, not sorted: index i must become id i + 1
KERAS_NAMES = ("person", "dog", "cat")


def view(images: Sequence[sample.SampleImage], style: str = "voc") -> List[sample.SampleImage]:
  """The images as the layout holds them (what a run must give back): integer boxes (int()
  truncates, as the writers do); voc: every image named <stem>.jpg, Roboflow split names."""
  result = []
  for im in images:
    boxes = [(label, *(float(math.trunc(v)) for v in coords)) for label, *coords in im.boxes]
    name = f"{layouts.stem(im.file_name)}.jpg" if style == "voc" else im.file_name
    split = layouts.ROBOFLOW_SPLIT[im.split] if style == "roboflow" else im.split
    result.append(dataclasses.replace(im, file_name=name, boxes=boxes, split=split))
  return result


def line(path: str, im: sample.SampleImage, names: Sequence[str]) -> str:
  return path + "".join(f" {int(x0)},{int(y0)},{int(x1)},{int(y1)},{names.index(label)}"
                        for label, x0, y0, x1, y1 in im.boxes)


def write_yolo_keras(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
                     style: str = "voc") -> Path:
  """style voc: target/VOCdevkit/VOC2007/JPEGImages/, target/2007_<split>.txt with absolute
  paths and target/model_data/voc_classes.txt; returns target. style roboflow: target/<split>/
  with the images, _annotations.txt and _classes.txt; returns target."""
  target.mkdir(parents=True, exist_ok=True)
  by_split: Dict[str, List[sample.SampleImage]] = {}
  if style == "voc":
    jpegs = target / "VOCdevkit" / "VOC2007" / "JPEGImages"
    jpegs.mkdir(parents=True, exist_ok=True)
    for im in images:
      shutil.copy(image_dir / im.file_name, jpegs / f"{layouts.stem(im.file_name)}.jpg")
      by_split.setdefault(im.split, []).append(im)
    for split, members in by_split.items():
      (target / f"2007_{split}.txt").write_text("".join(
          line(f"{jpegs.resolve()}/{layouts.stem(im.file_name)}.jpg", im, KERAS_NAMES) + "\n"
          for im in members), encoding="utf-8")
    (target / "model_data").mkdir(exist_ok=True)
    (target / "model_data" / "voc_classes.txt").write_text(
        "".join(f"{n}\n" for n in KERAS_NAMES), encoding="utf-8")
    return target
  layouts._roboflow_readme(target, "YOLO Keras TXT")
  names = sorted({b[0] for im in images for b in im.boxes})
  for im in images:
    by_split.setdefault(layouts.ROBOFLOW_SPLIT[im.split], []).append(im)
  for split, members in by_split.items():
    folder = target / split
    folder.mkdir(exist_ok=True)
    for im in members:
      shutil.copy(image_dir / im.file_name, folder / im.file_name)
    (folder / "_annotations.txt").write_text(
        "".join(line(im.file_name, im, names) + "\n" for im in members), encoding="utf-8")
    (folder / "_classes.txt").write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
  return target

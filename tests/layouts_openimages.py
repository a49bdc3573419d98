"""The Open Images layout, written from the generated sample dataset (conftest.make_dataset).

Mirrors the official files (looked up, not copied: the V5 and V6 download pages' format
samples, and a `head` of the V6 files quoted in GAIA-Inova/inspect-open-images):
- `oidv6-train-annotations-bbox.csv`: ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,
  IsOccluded,IsTruncated,IsGroupOf,IsDepiction,IsInside then the eight extreme-click columns
  XClick1X..XClick4X,XClick1Y..XClick4Y; numbers with six decimals (0.012500); clicks in the
  order top, left, bottom, right of the box.
- `validation-annotations-bbox.csv` (and test-): the 13 columns only, numbers as the shortest
  float (0.022673031, 1, 0).
- Rows sorted by ImageID (a 16-digit hex id), one row per box, Source xclick (some activemil),
  Confidence 1, flags 0/1.
- `class-descriptions-boxable.csv` (V4-V6, no header: `/m/011k07,Tortoise`) or V7's
  `oidv7-class-descriptions-boxable.csv` (header `LabelName,DisplayName`), with more classes
  than the boxes use; DisplayNames capitalised as Open Images writes them (Cat, Dog, Person).
- Images `<split>/<ImageID>.jpg` (train/, validation/): the official downloads' folders.
An image without boxes has no row in a box file, so the sample's background images are left
out (not copied either).
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from beam_tfrecord import sample

# Open Images' machine ids and display names of the sample's classes, and a few unused ones
MIDS = {"cat": "/m/01yrx", "dog": "/m/0bt9lr", "person": "/m/01g317"}
DISPLAY = {"cat": "Cat", "dog": "Dog", "person": "Person"}
OTHER_CLASSES = (("/m/011k07", "Tortoise"), ("/m/011q46kg", "Container"),
                 ("/m/012074", "Magpie"), ("/m/0jbk", "Animal"))
SPLITS = {"train": "train", "val": "validation"}  # sample split -> Open Images split
CLICKS = ("XClick1X", "XClick2X", "XClick3X", "XClick4X",
          "XClick1Y", "XClick2Y", "XClick3Y", "XClick4Y")
HEADER = ("ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,"
          "IsGroupOf,IsDepiction,IsInside")


def image_id(im: sample.SampleImage) -> str:
  """A 16-digit hex ImageID, stable for a file name."""
  return hashlib.sha1(im.file_name.encode("utf-8")).hexdigest()[:16]


def flags(im: sample.SampleImage, index: int) -> Tuple[int, int, int]:
  """(IsOccluded, IsTruncated, IsGroupOf) of box `index`: truncated when it touches the
  image's border, a group of every second box of an image with several, occluded every third."""
  _, x0, y0, x1, y1 = im.boxes[index]
  truncated = int(x0 <= 0 or y0 <= 0 or x1 >= im.width or y1 >= im.height)
  return int(index % 3 == 2), truncated, int(index % 2 == 1)


def view(images: Sequence[sample.SampleImage]) -> List[sample.SampleImage]:
  """The images as the layout holds them (what a run must give back): ImageID.jpg, Open
  Images' split names and display names; background images left out."""
  return [dataclasses.replace(
      im, file_name=f"{image_id(im)}.jpg", split=SPLITS[im.split],
      boxes=[(DISPLAY[label], *coords) for label, *coords in im.boxes])
      for im in images if im.boxes]


def _six(value: float) -> str:
  return f"{value:.6f}"


def _short(value: float) -> str:
  text = repr(round(value, 9))
  return text[:-2] if text.endswith(".0") else text


def box_row(im: sample.SampleImage, index: int, clicks: bool) -> str:
  label, x0, y0, x1, y1 = im.boxes[index]
  xmin, xmax, ymin, ymax = x0 / im.width, x1 / im.width, y0 / im.height, y1 / im.height
  number = _six if clicks else _short
  occluded, truncated, group_of = flags(im, index)
  source = "activemil" if index % 4 == 3 else "xclick"
  values = [image_id(im), source, MIDS[label], "1"] + [number(v) for v in (xmin, xmax, ymin, ymax)]
  values += [str(occluded), str(truncated), str(group_of), "0", "0"]
  if clicks:  # extreme clicks: top, left, bottom, right
    cx, cy = (xmin + xmax) / 2, (ymin + ymax) / 2
    values += [number(v) for v in (cx, xmin, cx, xmax, ymin, cy, ymax, cy)]
  return ",".join(values)


def box_file_name(split: str) -> str:
  return {"train": "oidv6-train-annotations-bbox.csv"}.get(split,
                                                           f"{split}-annotations-bbox.csv")


def write_openimages(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
                     version: str = "v6") -> Path:
  """target/ with a box CSV per split (box_file_name), the class descriptions of `version`
  (v6: no header; v7: oidv7-..., with a header) and target/<split>/<ImageID>.jpg; returns
  target."""
  target.mkdir(parents=True, exist_ok=True)
  rows: Dict[str, List[Tuple[str, int, str]]] = {}
  for im in images:
    if not im.boxes:
      continue
    split = SPLITS[im.split]
    (target / split).mkdir(exist_ok=True)
    shutil.copy(image_dir / im.file_name, target / split / f"{image_id(im)}.jpg")
    for i in range(len(im.boxes)):
      rows.setdefault(split, []).append((image_id(im), i, box_row(im, i, split == "train")))
  for split, lines in rows.items():
    lines.sort(key=lambda r: r[:2])  # by ImageID, an image's boxes in their order
    header = HEADER + ("," + ",".join(CLICKS) if split == "train" else "")
    (target / box_file_name(split)).write_text(
        header + "\n" + "".join(line + "\n" for _, _, line in lines), encoding="utf-8")
  classes = sorted(list(OTHER_CLASSES) + [(MIDS[c], DISPLAY[c]) for c in MIDS])
  if version == "v7":
    (target / "oidv7-class-descriptions-boxable.csv").write_text(
        "LabelName,DisplayName\n" + "".join(f"{m},{n}\n" for m, n in classes), encoding="utf-8")
  else:
    (target / "class-descriptions-boxable.csv").write_text(
        "".join(f"{m},{n}\n" for m, n in classes), encoding="utf-8")
  return target

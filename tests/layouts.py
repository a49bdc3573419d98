"""Writers of the layouts users arrive with, from the generated sample dataset (conftest).

Each mirrors how the real tool lays its files out (looked up, not copied):
- Ultralytics: a dataset yaml beside the dataset folder (`path:` relative to the yaml),
  images/<split>/ and labels/<split>/ (as COCO128), `names` as an {index: name} mapping, and no
  label file for a background image.
- Darknet (AlexeyAB): data/obj.data (classes=, train=, valid=, names=, backup=), data/obj.names,
  data/obj/ with each label .txt beside its image, data/train.txt listing `data/obj/...` paths.
- LabelImg: one XML per image (folder, filename, a <path> on the annotator's machine, source,
  size, segmented, objects with pose/truncated/difficult/bndbox); the raccoon dataset keeps the
  XMLs in annotations/ and the images in images/.
- Roboflow exports: train/ valid/ test/ folders holding the images with _annotations.coco.json
  (a first category with id 0 named after the dataset, supercategory "none"; the others have
  the dataset as supercategory; ids from 0 for images and annotations), or _annotations.csv,
  or XMLs beside the images; YOLO exports have data.yaml at the top (`train: ../train/images`)
  and train/images + train/labels. A README.roboflow.txt sits at the top.
- Class folders (Keras image_dataset_from_directory, the TF TFRecord tutorial):
  ROOT/SPLIT/CLASS/IMAGE, with the clutter real folders have (.DS_Store, a notes file).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path
from typing import Dict, List, Sequence, Tuple
from xml.sax.saxutils import escape

from beam_tfrecord import sample

# YOLO class order on purpose not sorted: index i must become id i + 1 in this order.
YOLO_NAMES = ("person", "dog", "cat")
ROBOFLOW_SPLIT = {"train": "train", "val": "valid"}


def yolo_line(im: sample.SampleImage, box: Tuple, names: Sequence[str] = YOLO_NAMES) -> str:
  label, x0, y0, x1, y1 = box
  cx, cy = (x0 + x1) / 2 / im.width, (y0 + y1) / 2 / im.height
  w, h = (x1 - x0) / im.width, (y1 - y0) / im.height
  return f"{names.index(label)} {cx:.10f} {cy:.10f} {w:.10f} {h:.10f}"


def stem(name: str) -> str:
  return os.path.splitext(name)[0]


def write_ultralytics(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
                      name: str = "shapes") -> Path:
  """target/<name>.yaml + target/<name>/images/<split>/ + labels/<split>/; returns the yaml."""
  root = target / name
  for im in images:
    (root / "images" / im.split).mkdir(parents=True, exist_ok=True)
    (root / "labels" / im.split).mkdir(parents=True, exist_ok=True)
    shutil.copy(image_dir / im.file_name, root / "images" / im.split / im.file_name)
    if im.boxes:  # background images have no label file (as in COCO128)
      (root / "labels" / im.split / f"{stem(im.file_name)}.txt").write_text(
          "".join(yolo_line(im, b) + "\n" for b in im.boxes), encoding="utf-8")
  splits = sorted({im.split for im in images})
  yaml_path = target / f"{name}.yaml"
  yaml_path.write_text(
      "# Ultralytics dataset yaml (COCO128 style)\n"
      f"path: {name}  # dataset root dir, relative to this file\n"
      + "".join(f"{s}: images/{s}  # {s} images (relative to 'path')\n" for s in splits)
      + "test:  # test images (optional)\n\n# Classes\nnames:\n"
      + "".join(f"  {i}: {n}\n" for i, n in enumerate(YOLO_NAMES)), encoding="utf-8")
  return yaml_path


def write_darknet(images: Sequence[sample.SampleImage], image_dir: Path, target: Path) -> Path:
  """target/data/obj.data, obj.names, obj/ (images + labels side by side), train.txt,
  valid.txt (the val split); returns obj.data."""
  data = target / "data"
  (data / "obj").mkdir(parents=True, exist_ok=True)
  lists: Dict[str, List[str]] = {"train": [], "valid": []}
  for im in images:
    shutil.copy(image_dir / im.file_name, data / "obj" / im.file_name)
    if im.boxes:
      (data / "obj" / f"{stem(im.file_name)}.txt").write_text(
          "".join(yolo_line(im, b) + "\n" for b in im.boxes), encoding="utf-8")
    lists["train" if im.split == "train" else "valid"].append(f"data/obj/{im.file_name}")
  for name, lines in lists.items():
    (data / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  (data / "obj.names").write_text("\n".join(YOLO_NAMES) + "\n", encoding="utf-8")
  (data / "obj.data").write_text(
      f"classes = {len(YOLO_NAMES)}\ntrain = data/train.txt\nvalid = data/valid.txt\n"
      "names = data/obj.names\nbackup = backup/\n", encoding="utf-8")
  return data / "obj.data"


def labelimg_xml(im: sample.SampleImage, folder: str = "images") -> str:
  objects = "".join(
      f"\n\t<object>\n\t\t<name>{escape(label)}</name>\n\t\t<pose>Unspecified</pose>\n"
      f"\t\t<truncated>0</truncated>\n\t\t<difficult>0</difficult>\n\t\t<bndbox>\n"
      f"\t\t\t<xmin>{x0}</xmin>\n\t\t\t<ymin>{y0}</ymin>\n\t\t\t<xmax>{x1}</xmax>\n"
      f"\t\t\t<ymax>{y1}</ymax>\n\t\t</bndbox>\n\t</object>"
      for label, x0, y0, x1, y1 in im.boxes)
  return (f"<annotation>\n\t<folder>{folder}</folder>\n\t<filename>{escape(im.file_name)}"
          f"</filename>\n\t<path>C:\\Users\\annotator\\Desktop\\{folder}\\{escape(im.file_name)}"
          "</path>\n\t<source>\n\t\t<database>Unknown</database>\n\t</source>\n\t<size>\n"
          f"\t\t<width>{im.width}</width>\n\t\t<height>{im.height}</height>\n"
          f"\t\t<depth>3</depth>\n\t</size>\n\t<segmented>0</segmented>{objects}\n"
          "</annotation>\n")


def write_raccoon(images: Sequence[sample.SampleImage], image_dir: Path, target: Path) -> Path:
  """target/annotations/*.xml and target/images/* (the raccoon dataset); returns target."""
  (target / "annotations").mkdir(parents=True, exist_ok=True)
  (target / "images").mkdir(parents=True, exist_ok=True)
  for im in images:
    shutil.copy(image_dir / im.file_name, target / "images" / im.file_name)
    (target / "annotations" / f"{stem(im.file_name)}.xml").write_text(
        labelimg_xml(im), encoding="utf-8")
  return target


def _roboflow_readme(target: Path, kind: str) -> None:
  (target / "README.roboflow.txt").write_text(
      f"\nshapes - v1 2026-11-23\n==============================\n\nThis dataset was exported "
      f"via roboflow.com\n\nThe dataset includes {kind} annotations.\n", encoding="utf-8")


def write_roboflow(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
                   kind: str, dataset_name: str = "shapes") -> Path:
  """A Roboflow export of `kind` coco | csv | voc | yolo under target; returns target."""
  target.mkdir(parents=True, exist_ok=True)
  _roboflow_readme(target, kind)
  by_split: Dict[str, List[sample.SampleImage]] = {}
  for im in images:
    by_split.setdefault(ROBOFLOW_SPLIT[im.split], []).append(im)
  names = sorted({b[0] for im in images for b in im.boxes})
  for split, members in by_split.items():
    folder = target / split
    folder.mkdir(exist_ok=True)
    if kind == "yolo":
      (folder / "images").mkdir(exist_ok=True)
      (folder / "labels").mkdir(exist_ok=True)
    for im in members:
      shutil.copy(image_dir / im.file_name,
                  (folder / "images" if kind == "yolo" else folder) / im.file_name)
    if kind == "coco":
      categories = [{"id": 0, "name": dataset_name, "supercategory": "none"}] + [
          {"id": i, "name": n, "supercategory": dataset_name}
          for i, n in enumerate(names, start=1)]
      doc = {"info": {"description": "Exported from roboflow.com", "version": "1"},
             "licenses": [{"id": 1, "url": "https://creativecommons.org/licenses/by/4.0/",
                           "name": "CC BY 4.0"}],
             "categories": categories, "images": [], "annotations": []}
      for image_id, im in enumerate(members):
        doc["images"].append({"id": image_id, "license": 1, "file_name": im.file_name,
                              "height": im.height, "width": im.width,
                              "date_captured": "2026-11-23T09:00:00+00:00"})
        for label, x0, y0, x1, y1 in im.boxes:
          doc["annotations"].append({
              "id": len(doc["annotations"]), "image_id": image_id,
              "category_id": names.index(label) + 1,
              "bbox": [x0, y0, round(x1 - x0, 4), round(y1 - y0, 4)],
              "area": round((x1 - x0) * (y1 - y0), 4), "segmentation": [], "iscrowd": 0})
      (folder / "_annotations.coco.json").write_text(json.dumps(doc, indent=4),
                                                     encoding="utf-8")
    elif kind == "csv":
      with open(folder / "_annotations.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["filename", "width", "height", "class", "xmin", "ymin", "xmax",
                         "ymax"])
        for im in members:
          for label, x0, y0, x1, y1 in im.boxes:
            writer.writerow([im.file_name, im.width, im.height, label, x0, y0, x1, y1])
    elif kind == "voc":
      for im in members:
        (folder / f"{stem(im.file_name)}.xml").write_text(labelimg_xml(im, split),
                                                          encoding="utf-8")
    elif kind == "yolo":
      for im in members:
        (folder / "labels" / f"{stem(im.file_name)}.txt").write_text(
            "".join(yolo_line(im, b, names) + "\n" for b in im.boxes), encoding="utf-8")
  if kind == "yolo":
    (target / "data.yaml").write_text(
        "train: ../train/images\nval: ../valid/images\n\n"
        f"nc: {len(names)}\nnames: {json.dumps(names)}\n\nroboflow:\n  workspace: test\n"
        f"  project: {dataset_name}\n  version: 1\n  license: CC BY 4.0\n"
        f"  url: https://universe.roboflow.com/test/{dataset_name}/dataset/1\n",
        encoding="utf-8")
  return target


def write_every_layout(images: Sequence[sample.SampleImage], image_dir: Path,
                       base: Path) -> Path:
  """Every layout of this module under base: ultralytics/, darknet/, raccoon/, folders/ and
  roboflow-{coco,csv,voc,yolo}/ (what a format's detection must tell apart); returns base."""
  write_ultralytics(images, image_dir, base / "ultralytics")
  write_darknet(images, image_dir, base / "darknet")
  write_raccoon(images, image_dir, base / "raccoon")
  write_class_folders(images, image_dir, base / "folders")
  for kind in ("coco", "csv", "voc", "yolo"):
    write_roboflow(images, image_dir, base / f"roboflow-{kind}", kind)
  return base


def image_class(im: sample.SampleImage) -> str:
  """The class folder of an image in the classification fixtures."""
  return im.boxes[0][0] if im.boxes else "background"


def write_class_folders(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
                        with_splits: bool = True) -> Path:
  """ROOT/SPLIT/CLASS/IMAGE (or ROOT/CLASS/IMAGE) plus .DS_Store files, a notes file and a
  hidden folder, which must be skipped; returns ROOT."""
  for im in images:
    folder = target / (im.split if with_splits else "") / image_class(im)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(image_dir / im.file_name, folder / im.file_name)
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
  (target / "README.txt").write_text("class folders\n", encoding="utf-8")
  hidden = target / (images[0].split if with_splits else "") / ".ipynb_checkpoints"
  hidden.mkdir(parents=True, exist_ok=True)
  shutil.copy(image_dir / images[0].file_name, hidden / images[0].file_name)
  return target


# --------------------------------------------------------------------------------------------
# Checking what a run wrote against the sample images


def expected_boxes(im: sample.SampleImage) -> List[Tuple[str, float, float, float, float]]:
  """(class, xmin, ymin, xmax, ymax) normalized, in annotation order."""
  return [(label, x0 / im.width, y0 / im.height, x1 / im.width, y1 / im.height)
          for label, x0, y0, x1, y1 in im.boxes]


def check_od_examples(run, images: Sequence[sample.SampleImage], image_dir: Path,
                      label_ids: Dict[str, int], split_of=None, tolerance: float = 1e-5) -> None:
  """Every image written once (matched by base name), to its split, with its bytes, size and
  boxes (to `tolerance` in normalized units), class names and ids."""
  import hashlib
  split_of = split_of or (lambda im: im.split)
  written = {os.path.basename(e["filename"]): e for e in run.examples}
  assert sorted(written) == sorted(im.file_name for im in images)
  for im in images:
    ex, where = written[im.file_name], im.file_name
    data = (image_dir / im.file_name).read_bytes()
    assert ex["split"] == split_of(im), where
    assert ex["image/encoded"] == data, where
    assert ex["image/format"] == im.format.encode(), where
    assert (ex["image/width"], ex["image/height"]) == (im.width, im.height), where
    assert ex["image/key/sha256"] == hashlib.sha256(data).hexdigest().encode(), where
    want = expected_boxes(im)
    got = list(zip(ex["image/object/class/text"], ex["image/object/class/label"],
                   ex["image/object/bbox/xmin"], ex["image/object/bbox/ymin"],
                   ex["image/object/bbox/xmax"], ex["image/object/bbox/ymax"]))
    assert len(got) == len(want), f"{where}: {len(got)} objects, expected {len(want)}"
    for g, w in zip(got, want):
      assert g[0].decode("utf-8") == w[0] and g[1] == label_ids[w[0]], f"{where}: {g} vs {w}"
      assert all(abs(a - b) <= tolerance for a, b in zip(g[2:], w[1:])), f"{where}: {g} vs {w}"


def split_counts(run) -> Dict[str, int]:
  return {split: entry["examples"] for split, entry in run.manifest["splits"].items()}


def write_label_map(path: Path, ids: Dict[str, int]) -> Path:
  path.write_text("".join(f"item {{\n  id: {i}\n  name: '{n}'\n}}\n"
                          for n, i in sorted(ids.items(), key=lambda kv: kv[1])),
                  encoding="utf-8")
  return path

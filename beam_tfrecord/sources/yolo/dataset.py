"""YOLO labels: Ultralytics `data.yaml` and Darknet `obj.data` + `obj.names`.

One `.txt` per image, one line per object: `class cx cy w h` in [0, 1] image units, or
`class x1 y1 x2 y2 ...` (a segmentation polygon of 3 points or more, whose bounding box is
used; with --include-masks it is rasterized into the mask, masks.polygon_json). A pose
dataset (`kpt_shape: [K, D]` in the yaml) has `class cx cy w h` followed by K keypoints of D
values: exactly 5 + K*D columns, the box being the first four numbers. A line of any other
length is a malformed_line, never guessed at. The label file
of an image is found the Ultralytics way: the last `images` component of its path becomes
`labels` and the extension `.txt`; without an `images` component it lies beside the image
(Darknet). An image without a label file is a background image. Boxes stay normalized
(Box.normalized): the source never reads an image. YOLO class i becomes label id i + 1 (0 is
background in the TF OD API), or i under a schema whose ids start at 0.

The dataset description is read when the pipeline is built (a problem with it is a
UsageError); image listings and label files are read on workers.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import (SourceOutput, image_extensions,
                                        is_hidden)
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import (exists, list_dir, list_tree, parent,
                                         read_text)
from beam_tfrecord.records import masks

LOG = logging.getLogger("beam_tfrecord")
YAML_SPLITS = ("train", "val", "test")          # Ultralytics keys, kept as split names
DARKNET_SPLITS = (("train", "train"), ("valid", "valid"))  # obj.data key -> split
DARKNET_NAMES = ("obj.data",)

# Budgets that keep a YOLO dataset's memory proportional to its files: the dataset yaml,
# obj.data and obj.names are small (1 MB is ~50,000 class names); a list file holds one path
# per image (~100 bytes; 512 MB is ~5M images, read by one worker); a label file holds one
# image's objects (16 MB is ~40,000 polygons of 20 points). Larger ones are 'too_large'.
MAX_YAML_BYTES = 1 << 20
MAX_LIST_BYTES = 512 << 20
MAX_LABEL_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class YoloDataset:
  """What a data.yaml / obj.data says: keys are relative to `root`; every split lists image
  directories or .txt lists of image paths (`bases`: directories list lines may be relative
  to, besides the list's own)."""
  described_by: str
  root: str
  names: Tuple[str, ...]
  splits: Tuple[Tuple[str, Tuple[str, ...]], ...]
  bases: Tuple[str, ...] = ()
  kpt_shape: Optional[Tuple[int, int]] = None  # pose: (keypoints, values per keypoint)


def _join(base: str, rel: str) -> str:
  if paths.is_remote(rel) or os.path.isabs(rel):
    return rel
  joined = paths.join(base, rel)
  return joined if paths.is_remote(joined) else os.path.abspath(joined)


def parse_names(value, where: str) -> Tuple[str, ...]:
  """`names` as a list, or as an {index: name} dict with indices 0..N-1."""
  if isinstance(value, (list, tuple)):
    names = [str(n) for n in value]
  elif isinstance(value, dict):
    try:
      indexed = {int(k): str(v) for k, v in value.items()}
    except (TypeError, ValueError):
      raise UsageError(f"{where}: `names` keys must be class indices, got "
                       f"{sorted(map(str, value))}") from None
    if sorted(indexed) != list(range(len(indexed))):
      raise UsageError(f"{where}: `names` indices must be 0..{len(indexed) - 1}, got "
                       f"{sorted(indexed)}")
    names = [indexed[i] for i in range(len(indexed))]
  else:
    raise UsageError(f"{where}: `names` must be a list or an {{index: name}} mapping")
  if not names:
    raise UsageError(f"{where}: `names` is empty")
  return tuple(names)


def parse_kpt_shape(value, where: str) -> Optional[Tuple[int, int]]:
  """`kpt_shape: [K, D]` of a pose yaml: K >= 1 keypoints of D = 2 (x y) or 3 (x y
  visibility) values; None when absent."""
  if value is None:
    return None
  ok = (isinstance(value, (list, tuple)) and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and value[0] >= 1 and value[1] in (2, 3))
  if not ok:
    raise UsageError(f"{where}: `kpt_shape` must be [keypoints, 2 or 3], got {value!r}")
  return int(value[0]), int(value[1])


def _existing(candidates: Sequence[str]) -> Optional[str]:
  for candidate in candidates:
    if exists(candidate):
      return candidate
  return None


def load_data_yaml(uri: str) -> YoloDataset:
  """An Ultralytics dataset yaml. `path` is relative to the yaml (default: its directory);
  train/val/test are a directory, a .txt list, or a list of them, relative to `path`. As in
  Ultralytics, an entry `../x` that does not exist is tried as `x` (Roboflow's data.yaml says
  `../train/images` next to train/)."""
  import yaml
  try:
    doc = yaml.safe_load(read_text(uri, MAX_YAML_BYTES).decode("utf-8-sig"))
  except Exception as e:  # unreadable, not UTF-8, not YAML
    raise UsageError(f"cannot read {uri} as YAML: {type(e).__name__}: {e}") from None
  if not isinstance(doc, dict):
    raise UsageError(f"{uri} is not a YOLO dataset yaml (no key: value mapping)")
  if "names" not in doc:
    raise UsageError(f"{uri} has no `names` (the class list of a YOLO dataset yaml)")
  names = parse_names(doc["names"], uri)
  kpt_shape = parse_kpt_shape(doc.get("kpt_shape"), uri)
  root = _join(".", parent(uri))
  if doc.get("path"):
    root = _join(root, str(doc["path"]))
  splits = []
  for split in YAML_SPLITS:
    value = doc.get(split)
    if not value:
      continue
    entries = []
    for entry in (value if isinstance(value, list) else [value]):
      entry = str(entry)
      found = _existing([_join(root, entry)] + (
          [_join(root, entry[3:])] if entry.startswith("../") else []))
      if found is None:
        raise UsageError(f"{uri}: {split} entry {entry!r} does not exist under {root}")
      entries.append(found)
    splits.append((_folder_split(split, entries), tuple(entries)))
  if not splits:
    raise UsageError(f"{uri} names no images (no train/val/test entries)")
  return YoloDataset(posixpath.basename(uri.replace("\\", "/")), root, names, tuple(splits),
                     kpt_shape=kpt_shape)


EXPORT_SPLITS = ("train", "valid", "val", "validation", "test")


def _folder_split(key: str, entries: Sequence[str]) -> str:
  """A split named as its folder when the yaml points at SPLIT/images (a Roboflow export:
  `val: ../valid/images` gives the split `valid`), else the yaml's key."""
  folders = {posixpath.basename(posixpath.dirname(e.replace("\\", "/").rstrip("/")))
             for e in entries if posixpath.basename(e.replace("\\", "/").rstrip("/")) == "images"}
  if len(folders) == 1 and len(entries) == 1 and next(iter(folders)).lower() in EXPORT_SPLITS:
    return folders.pop()
  return key


def parse_darknet_data(text: str) -> Dict[str, str]:
  """`key = value` lines of an obj.data."""
  result = {}
  for line in text.splitlines():
    key, sep, value = line.partition("=")
    if sep and key.strip() and not key.strip().startswith("#"):
      result[key.strip()] = value.strip()
  return result


def load_darknet(uri: str) -> YoloDataset:
  """A Darknet obj.data. Its paths (train=, valid=, names=) are relative to the directory
  darknet runs in: usually the parent of data/, where obj.data itself lives, so both that
  directory and its parent are tried."""
  try:
    fields = parse_darknet_data(read_text(uri, MAX_YAML_BYTES).decode("utf-8-sig"))
  except Exception as e:
    raise UsageError(f"cannot read {uri}: {type(e).__name__}: {e}") from None
  here = _join(".", parent(uri))
  bases = [here, parent(here)]

  def locate(key: str) -> str:
    found = _existing([_join(b, fields[key]) for b in bases])
    if found is None:
      raise UsageError(f"{uri}: {key} = {fields[key]} exists neither under {bases[0]} nor "
                       f"under {bases[1]}")
    return found

  if not fields.get("names"):
    raise UsageError(f"{uri} has no names= line (the obj.names file)")
  names_text = read_text(locate("names"), MAX_YAML_BYTES).decode("utf-8-sig")
  names = parse_names([n.strip() for n in names_text.splitlines() if n.strip()],
                      fields["names"])
  splits = tuple((split, (locate(key),)) for key, split in DARKNET_SPLITS if fields.get(key))
  if not splits:
    raise UsageError(f"{uri} has neither train= nor valid=")
  # the darknet directory: where the relative paths in obj.data resolved
  root = next((b for b in bases if _existing([_join(b, fields["names"])])), here)
  return YoloDataset(posixpath.basename(uri.replace("\\", "/")), root, names, splits,
                     tuple(bases))


def load(uri: str, split: Optional[str] = None) -> YoloDataset:
  """A data.yaml / obj.data file, or a directory holding one. With `split`, every image the
  file names gets that split (one folder of a Roboflow export)."""
  if not uri.endswith((".yaml", ".yml", ".data")):
    found = detect_file(uri)
    if found is None:
      raise UsageError(f"{uri} holds no data.yaml or obj.data")
    uri = found
  dataset = load_darknet(uri) if uri.endswith(".data") else load_data_yaml(uri)
  if split:
    entries = tuple(sorted({e for _, es in dataset.splits for e in es}))
    dataset = dataclasses.replace(dataset, splits=((split, entries),))
  return dataset


def detect_file(directory: str) -> Optional[str]:
  """The YOLO description in a directory: data.yaml (or another .yaml with `names`), or a
  Darknet .data file."""
  _, files = list_dir(directory)
  for name in ("data.yaml", "data.yml", *DARKNET_NAMES):
    if name in files:
      return paths.join(directory, name)
  for name in files:
    if name.endswith(".data"):
      return paths.join(directory, name)
  return None


def detect(path: str) -> Optional[str]:
  """--format auto: what makes `path` a YOLO dataset, else None."""
  name = posixpath.basename(path.replace("\\", "/").rstrip("/"))
  if name.endswith((".yaml", ".yml")):
    return name
  if name.endswith(".data"):
    return f"{name}, Darknet"
  found = detect_file(path)
  if found:
    base = posixpath.basename(found.replace("\\", "/"))
    return base if not base.endswith(".data") else f"{base}, Darknet"
  return None


# ---------------------------------------------------------------------------------------------
# Pure functions: label paths and label lines

_EPS = 1e-6
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def label_path(image_uri: str) -> str:
  """Ultralytics' img2label_paths: the last /images/ becomes /labels/, extension -> .txt."""
  text = image_uri.replace("\\", "/")
  head, sep, tail = text.rpartition("/images/")
  if sep:
    text = head + "/labels/" + tail
  stem, dot, ext = text.rpartition(".")
  return (stem if dot and "/" not in ext else text) + ".txt"


def label_dir(image_dir: str) -> str:
  """The directory label_path maps the images of `image_dir` to."""
  return label_path(paths.join(image_dir, "probe"))[:-len("/probe.txt")]


def line_shape(count: int, kpt_shape: Optional[Tuple[int, int]] = None) -> Optional[str]:
  """What a line of `count` fields is: 'box', 'polygon' or 'pose'; None when it fits no rule
  of the dataset. A pose dataset has pose lines only (5 + K*D fields, as Ultralytics checks);
  else 5 fields are a box, an even number of 6 or more coordinates a polygon (3+ points: a
  line of class + 6 numbers is a triangle, as Ultralytics reads it)."""
  if kpt_shape is not None:
    return "pose" if count == 5 + kpt_shape[0] * kpt_shape[1] else None
  if count == 5:
    return "box"
  return "polygon" if count >= 7 and count % 2 == 1 else None


def parse_line(line: str, names: Sequence[str], include_masks: bool = False,
               kpt_shape: Optional[Tuple[int, int]] = None) -> ObjectAnnotation:
  """One label line -> an object with a normalized box. InputError for a malformed line (one
  whose length fits no rule, line_shape), a class index out of range, or coordinates outside
  [0, 1]. With include_masks a polygon line also carries its polygon as the object's
  segmentation (masks.polygon_json: normalized points, rasterized once the image size is
  known); a box or pose line carries none. A pose line's box is the four numbers after the
  class; its keypoints are checked (x, y in [0, 1]) but not written."""
  tokens = line.split()
  if not all(_NUMBER.match(t) for t in tokens):
    raise InputError("parse", "malformed_line", f"{line!r} is not numbers")
  shape = line_shape(len(tokens), kpt_shape)
  if shape is None:
    expected = (f"`class cx cy w h` + {kpt_shape[0]} keypoints of {kpt_shape[1]} values "
                f"({5 + kpt_shape[0] * kpt_shape[1]} fields, the yaml's kpt_shape)"
                if kpt_shape else
                "`class cx cy w h` or `class x1 y1 x2 y2 x3 y3 ...` (a polygon: an even "
                "number of coordinates, 3 points or more)")
    raise InputError("parse", "malformed_line",
                     f"{line!r} has {len(tokens)} fields: expected {expected}")
  if not re.fullmatch(r"\+?\d+(\.0*)?", tokens[0]):
    raise InputError("parse", "malformed_line", f"class {tokens[0]!r} is not an index")
  index = int(float(tokens[0]))
  if index >= len(names):
    raise InputError("validate", "class_out_of_range",
                     f"class index {index} is out of range: the dataset names {len(names)} "
                     f"classes (0..{len(names) - 1})")
  values = [float(t) for t in tokens[1:]]
  checked = values
  if shape == "pose":  # the box, then each keypoint's x and y (not its visibility)
    step = kpt_shape[1]
    checked = values[:4] + [v for i in range(4, len(values), step) for v in values[i:i + 2]]
    values = values[:4]
  if not all(0.0 <= v <= 1.0 for v in checked):
    raise InputError("validate", "bbox_outside_unit",
                     f"{line!r}: coordinates must be normalized to [0, 1]")
  if len(values) == 4:
    cx, cy, w, h = values
    corners = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
  else:
    xs, ys = values[0::2], values[1::2]
    corners = (min(xs), min(ys), max(xs), max(ys))
  # a box touching the border computes to 1.0000000001 from rounded cx/w: that is the
  # border, not a box to clip (and count); real overhangs are left to --bbox-policy
  corners = tuple(min(max(c, 0.0), 1.0) if -_EPS < c < 1 + _EPS else c for c in corners)
  segmentation = (masks.polygon_json(values, normalized=True)
                  if include_masks and len(values) > 4 else None)
  return ObjectAnnotation(label=names[index], box=Box(*corners, normalized=True),
                          segmentation=segmentation)


def parse_label_text(text: str, names: Sequence[str], include_masks: bool = False,
                     kpt_shape: Optional[Tuple[int, int]] = None
                     ) -> Tuple[List[ObjectAnnotation], List[Tuple[int, InputError]]]:
  """Objects of one label file, and (line number, error) for every unusable line."""
  objects, errors = [], []
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      objects.append(parse_line(line, names, include_masks, kpt_shape))
    except InputError as e:
      errors.append((number, e))
  return objects, errors


# ---------------------------------------------------------------------------------------------
# The transform


def _relative(root: str, uri: str) -> str:
  if paths.is_remote(uri):
    return uri[len(root.rstrip("/")) + 1:] if uri.startswith(root.rstrip("/") + "/") else uri
  return os.path.relpath(uri, root).replace(os.sep, "/")


class _ListImages(beam.DoFn):
  """(split, entry) -> (split, image name relative to root, its label path, label exists).

  A directory entry is listed recursively, and so is its label directory, whose label files
  go to the 'labels' output (for the orphan check); a .txt entry is a list of image paths."""

  def __init__(self, dataset: YoloDataset):
    self.dataset = dataset
    self.extensions = None

  def setup(self):
    self.extensions = image_extensions()

  def _is_image(self, name: str) -> bool:
    return posixpath.splitext(name)[1].lower() in self.extensions and not is_hidden(name)

  def process(self, task):
    split, entry = task
    root = self.dataset.root
    if entry.endswith(".txt"):
      yield from self._from_list(split, entry, root)
      return
    images = [paths.join(entry, rel) for rel in list_tree(entry) if self._is_image(rel)]
    labels_in = label_dir(entry)
    found = set()
    for rel in list_tree(labels_in) if exists(labels_in) else []:
      if is_label_file(rel):
        found.add(paths.join(labels_in, rel).replace("\\", "/"))
    for uri in images:
      label = label_path(uri)
      yield split, _relative(root, uri), label, label in found
    for label in sorted(found):
      yield beam.pvalue.TaggedOutput("labels", label)

  def _from_list(self, split, entry, root):
    try:
      text = read_text(entry, MAX_LIST_BYTES).decode("utf-8-sig")
    except Exception as e:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=entry, stage="read", reason="unreadable", level="file",
          message=f"{type(e).__name__}: {e}"))
      return
    bases = [parent(entry), root, *self.dataset.bases]
    inside = [b for b in dict.fromkeys(bases) if paths.under(b, root)]
    relocated = []
    for number, line in enumerate(text.splitlines(), start=1):
      name = line.strip()
      if not name or name.startswith("#"):
        continue
      foreign = not paths.is_remote(name) and is_absolute(name)
      candidates = [name] if paths.is_remote(name) or foreign else [
          _join(b, name[2:] if name.startswith("./") else name) for b in bases]
      uri = _existing(candidates)
      if uri is None and foreign:
        # written on another machine (Colab: /content/drive/...): the same file by its
        # trailing components, only inside the dataset root
        uri = _existing(trailing_candidates(name, inside))
        if uri is not None:
          relocated.append((name, uri))
      if uri is None:
        message = (f"{name} is an absolute path that does not exist here (written on another "
                   f"machine?), and no file under {root} ends with its trailing components"
                   if foreign else f"{name} exists under none of {sorted(set(bases))}")
        yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=f"{entry}:{number}", stage="locate", reason="missing_image", key=name,
            message=message))
        continue
      label = label_path(uri)
      yield split, _relative(root, uri), label, exists(label)
    if relocated:
      name, uri = relocated[0]
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=entry, stage="locate", reason="relocated_image", level="warning",
          message=f"{len(relocated)} absolute path(s) of this list do not exist here; each was "
          f"found under {root} by its trailing components (e.g. {name} -> {uri})"))


def is_absolute(name: str) -> bool:
  """A POSIX or a Windows absolute path (C:\\data\\obj\\1.jpg, as a Windows user's list says)."""
  return os.path.isabs(name) or bool(re.match(r"^[A-Za-z]:[\\/]", name))


def trailing_candidates(name: str, bases: Sequence[str]) -> List[str]:
  """Where an absolute path from another machine may lie in this copy: its trailing
  components (longest first, at least the file name) under each base. '..' and '.' parts
  are dropped, so a candidate never leaves its base."""
  parts = [p for p in re.split(r"[\\/]", name) if p and p not in (".", "..")]
  if parts and re.fullmatch(r"[A-Za-z]:", parts[0]):
    parts = parts[1:]
  return [_join(base, "/".join(parts[i:])) for i in range(len(parts)) for base in bases]


def is_label_file(relative: str) -> bool:
  """A .txt that may be a label file (LabelImg's classes.txt and hidden files are not)."""
  return (relative.endswith(".txt") and not is_hidden(relative)
          and posixpath.basename(relative) != "classes.txt")


def _label_files_in(folder: str, lists: frozenset) -> List[str]:
  """Label files directly in a folder of a listed image's label (Darknet: beside it)."""
  return [paths.join(folder, name) for name in list_dir(folder)[1]
          if is_label_file(name) and paths.join(folder, name) not in lists]


def _orphans(element):
  """(label path, {'image': [...], 'file': [...]}) -> an error when no image claims it."""
  label, grouped = element
  if grouped["file"] and not grouped["image"]:
    yield ErrorRecord(source=label, stage="parse", reason="orphan_label", level="file",
                      message="label file without an image: no image of the dataset has "
                      "this label path")


class _ReadLabels(beam.DoFn):
  """(split, image name, label path, label exists) -> ImageAnnotation + per-line errors."""

  def __init__(self, dataset: YoloDataset, allow_absolute: bool, follow_symlinks: bool,
               include_masks: bool = False):
    self.dataset = dataset
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def process(self, item):
    split, name, label, has_label = item
    label = label if has_label else None
    source = label or name
    try:
      key, uri = paths.resolve(self.dataset.root, name, self.allow_absolute,
                               self.follow_symlinks)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(source, name))
      return
    objects: List[ObjectAnnotation] = []
    if label is not None:
      try:
        text = read_text(label, MAX_LABEL_BYTES).decode("utf-8-sig")
      except Exception as e:  # unreadable or not text: the image's objects are unknown
        yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=label, stage="parse", reason="unreadable_label", key=key, level="file",
            message=f"{type(e).__name__}: {e}; the image is not converted"))
        return
      objects, errors = parse_label_text(text, self.dataset.names, self.include_masks,
                                         self.dataset.kpt_shape)
      for number, error in errors:
        yield beam.pvalue.TaggedOutput("errors", error.record(f"{label}:{number}", key,
                                                              level="object"))
    yield ImageAnnotation(key=key, uri=uri, source_id=key, source=source,
                          objects=tuple(objects), split=split)


class ReadYolo(beam.PTransform):
  """YOLO datasets -> SourceOutput.

  In: YoloDatasets (from `load`), and the id of the first class (1 for the TF OD API).
  Out: one ImageAnnotation per image (background images included, boxes normalized), the
  (name, id) of every class in the yaml's order, and ErrorRecords for orphan label files,
  unusable lines and missing images. With include_masks, objects of segmentation lines carry
  their polygon (see parse_line).
  """

  def __init__(self, datasets: Sequence[YoloDataset], first_id: int = 1,
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False):
    super().__init__()
    self.datasets = list(datasets)
    names = {d.names for d in self.datasets}
    if len(names) > 1:
      raise UsageError(f"the YOLO inputs name different classes: {sorted(names)}")
    self.first_id = first_id
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def expand(self, root):
    images, errors = [], []
    for i, dataset in enumerate(self.datasets):
      tasks = [(split, entry) for split, entries in dataset.splits for entry in entries]
      listed = (root
                | f"Entries[{i}]" >> beam.Create(tasks)
                | f"SpreadEntries[{i}]" >> beam.Reshuffle()
                | f"List[{i}]" >> beam.ParDo(_ListImages(dataset)).with_outputs(
                    "labels", "errors", main="images"))
      # Orphan label files, across all splits at once (Darknet's train and valid lists
      # share one folder): label files listed near the images that no image claims.
      lists = frozenset(e for _, entries in dataset.splits for e in entries)
      beside = (listed.images
                | f"LabelFolders[{i}]" >> beam.Map(lambda t: posixpath.dirname(t[2]))
                | f"DistinctFolders[{i}]" >> beam.Distinct()
                | f"ListFolders[{i}]" >> beam.FlatMap(_label_files_in, lists))
      files = ((listed.labels, beside)
               | f"LabelFiles[{i}]" >> beam.Flatten()
               | f"FileKeys[{i}]" >> beam.Map(lambda p: (p, True)))
      claimed = listed.images | f"Claimed[{i}]" >> beam.Map(lambda t: (t[2], True))
      orphans = ({"file": files, "image": claimed}
                 | f"MatchLabels[{i}]" >> beam.CoGroupByKey()
                 | f"Orphans[{i}]" >> beam.FlatMap(_orphans))
      read = (listed.images
              | f"SpreadImages[{i}]" >> beam.Reshuffle()
              | f"Labels[{i}]" >> beam.ParDo(_ReadLabels(
                  dataset, self.allow_absolute, self.follow_symlinks,
                  self.include_masks)).with_outputs(
                      "errors", main="images"))
      images.append(read.images)
      errors += [listed.errors, read.errors, orphans]
    names = self.datasets[0].names
    categories = root | "Classes" >> beam.Create(
        [(name, i + self.first_id) for i, name in enumerate(names)])
    return SourceOutput(images=tuple(images) | "Images" >> beam.Flatten(),
                        errors=tuple(errors) | "Errors" >> beam.Flatten(),
                        categories=categories)


# --- the source protocol (sources/registry.py) ---

MASKS = True  # segmentation polygons: --include-masks rasterizes them
IMAGES = False  # the yaml / obj.data names the images: --images is refused, never ignored
EXPORT_WHAT = "data.yaml"  # what each split folder of an export holds


def check(config) -> None:
  """The yaml / obj.data parses and names existing folders."""
  for item in config.inputs:
    split, uri = paths.parse_assignment(item)
    load(uri, split)


def possible_splits(config) -> Optional[set]:
  return None  # not looked at before the run


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  datasets = [load(uri, split) for split, uri in
              (paths.parse_assignment(item) for item in config.inputs)]
  source = root | "ReadYolo" >> ReadYolo(datasets, first_id, config.allow_absolute_paths,
                                         config.follow_symlinks,
                                         include_masks=config.include_masks)
  return source, sorted({s for d in datasets for s, _ in d.splits})


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """The dataset yaml / obj.data, the dataset root, each image directory and its label
  directory (or list file)."""
  patterns: List[Tuple[str, str]] = []
  for item in config.inputs:
    split, uri = paths.parse_assignment(item)
    dataset = load(uri, split)
    patterns.append(("tree", paths.join(dataset.root, "**")))
    for _, entries in dataset.splits:  # entries may lie outside the root (../x)
      for entry in entries:
        patterns.append(("file", entry) if entry.endswith(".txt") else
                        ("tree", paths.join(entry, "**")))
        if not entry.endswith(".txt"):
          patterns.append(("tree", paths.join(label_dir(entry), "**")))
    if uri.endswith((".yaml", ".yml", ".data")):
      patterns.append(("file", uri))
  return patterns, []

"""The class names a source declares, where the launcher can know them cheaply: what
--classes and --class-map are checked against before the run (a typo found at launch, not
after the whole conversion). Every class an image can carry is among them: a YOLO index the
dataset yaml does not name, a CVAT label its <meta> lacks, an Open Images LabelName the
descriptions lack, are errors of their objects, and COCO's and the class folders' classes are
their categories. None where the classes are known only once the data is read (VOC, CSV,
LabelMe, Labelbox; a COCO file whose `categories` come after its head): the run's own check
(prepare/select.py) then finds an unknown name, after the conversion.

What is read: COCO, at most coco.head.LAUNCH_HEAD_BYTES of each file; YOLO, the dataset
yaml or obj.names; class folders, one listing per split folder; CVAT, each XML's <meta> within
that head; Open Images, the class descriptions; yolo-keras, the classes file. Anything that
cannot be read here is None, not an error: the format's pre-run check and the workers say what
is wrong with it. Beam-free at import (class folders import Beam when asked)."""
from __future__ import annotations

import io
from typing import Callable, Dict, Optional, Set

from beam_tfrecord.sources.coco.head import LAUNCH_HEAD_BYTES
from beam_tfrecord.sources.depth import MAX_DEPTH
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import open_read, read_label_map


def declared_classes(options) -> Optional[Set[str]]:
  """The class names the source of these SourceOptions (registry.options_of) declares, or
  None when they are not known cheaply at launch (see the module's docstring)."""
  reader = _READERS.get(options.format)
  if reader is None:
    return None
  try:
    names = reader(options)
  except Exception:  # unreadable, malformed, too large: the pre-run check or the run says so
    return None
  return set(names) if names else None


def label_map_classes(uri: str, min_id: int) -> Optional[Set[str]]:
  """The names of a --label-map (the classes the run can write), None when it cannot be read
  (the pre-run check, sources/checks.check_label_map, says why)."""
  try:
    return set(read_label_map(uri, min_id))
  except Exception:
    return None


# Where each format's names come from, as the launcher's one-line refusal says it
WHERE = {"coco": "its COCO categories", "yolo": "the names of its dataset yaml",
         "folders": "its class folders", "cvat": "the labels of its <meta>",
         "openimages": "its class descriptions", "yolo-keras": "its classes file"}


def _head(uri: str) -> bytes:
  """The first LAUNCH_HEAD_BYTES of an annotation file, opened as the workers open it (a
  FIFO or a device is not read: open_read refuses what is not a regular file)."""
  with open_read(uri) as f:
    return f.read(LAUNCH_HEAD_BYTES)


def coco_categories(data: bytes) -> Optional[Set[str]]:
  """The names of the `categories` array of a COCO file's head, None unless that array ends
  within it (the official files put it last, Roboflow's and CVAT's exports first). Flat ijson
  events with a depth limit, as coco/head.check_input reads the head: no nesting costs more
  than the events themselves."""
  if b'"categories"' not in data:  # most heads of large files end before it: not parsed
    return None
  import ijson
  try:
    return _categories(ijson.basic_parse(io.BytesIO(data), use_float=True))
  except (ijson.JSONError, ValueError):  # not JSON (or not UTF-8), or the head ends first
    return None


def _categories(events) -> Optional[Set[str]]:
  names: Set[str] = set()
  depth, key, inside, field = 0, None, False, None
  for event, value in events:
    if event in ("start_map", "start_array"):
      depth += 1
      if depth > MAX_DEPTH or (depth == 1 and event != "start_map"):
        return None
      if depth == 2 and key == "categories":
        if event != "start_array":
          return None
        inside = True
    elif event in ("end_map", "end_array"):
      depth -= 1
      if inside and depth == 1:
        return names  # the array ended within the head: every category was seen
    elif event == "map_key":
      if depth == 1:
        key = value
      elif inside and depth == 3:
        field = value
    elif inside and depth == 3 and field == "name" and isinstance(value, str):
      names.add(value)
  return None  # the head (the whole file) ended without a complete `categories`


def _coco(options) -> Optional[Set[str]]:
  found: Set[str] = set()
  for _, uri, _ in options.file_inputs():
    names = coco_categories(_head(uri))
    if names is None:  # one file whose categories are unknown: any name may be its
      return None
    found |= names
  return found


def _yolo(options) -> Set[str]:
  from beam_tfrecord.sources import yolo
  return {name for item in options.inputs
          for name in yolo.load(paths.parse_assignment(item)[1]).names}


def _folders(options) -> Set[str]:
  from beam_tfrecord.sources.folders import ReadFolders  # lists the class folders, reads none
  return set(ReadFolders([paths.parse_assignment(item) for item in options.inputs],
                         follow_symlinks=options.follow_symlinks).classes)


def _cvat(options) -> Optional[Set[str]]:
  from beam_tfrecord.sources import cvat
  found: Set[str] = set()
  for item in options.inputs:
    xml = cvat.annotation_file(paths.parse_assignment(item)[1])
    meta = cvat.read_meta(io.BytesIO(_head(xml)))
    if not meta.labels:  # no <labels>: leave the file to the run
      return None
    found |= meta.labels
  return found


def _openimages(options) -> Set[str]:
  from beam_tfrecord.sources import openimages
  return set(openimages.load_descriptions(openimages.find_descriptions(options)).values())


def _yolo_keras(options) -> Set[str]:
  from beam_tfrecord.sources import yolo_keras
  return set(yolo_keras.class_names(options))


_READERS: Dict[str, Callable] = {"coco": _coco, "yolo": _yolo, "folders": _folders,
                                 "cvat": _cvat, "openimages": _openimages,
                                 "yolo-keras": _yolo_keras}

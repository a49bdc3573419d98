"""LabelMe (wkentaro/labelme 3.x to 5.x): a folder of per-image JSON files, searched
recursively, or one `SPLIT=DIR` folder per split.

Each JSON holds `shapes` [{label, points [[x, y], ...], group_id, shape_type, ...}],
`imagePath` (relative to the JSON's folder, '\\' in files written on Windows), `imageData`
(the image as base64, or null), `imageHeight` and `imageWidth`. Points are pixels of the
image as LabelMe shows it (EXIF applied). A `rectangle` (two corners in any order) is a box;
a `polygon` (3+ points) gives its bounding box and, with --include-masks, its mask. Shapes
that share an integer `group_id` in one file are one object: the union of their boxes and of
their masks; a group whose shapes carry different labels is an object-level error naming the
group. `circle`, `line`, `linestrip`, `point`, `mask` (5.x AI masks) and any other type are
`unsupported_shape` warnings naming the type and the file, never dropped silently. Shapes
labelled `__ignore__` (labelme2coco's ignore regions) are skipped: they are no class.
A 3.x file without `shape_type` has polygons (what labelme read it as).

The image: without --images the image root is the input folder, and the image is imagePath
joined to the JSON's folder; when that is not there (or leaves the input folder), the file
of the same base name beside the JSON. So with annotations/ and images/ side by side and
imagePath `../images/x.jpg`, give their parent folder as --input. With --images DIR, the
image is imagePath's base name in DIR under the JSON's sub-folder, then directly in DIR (as
a folder of VOC XMLs). When that file is missing (or the JSON has no imagePath) and the JSON
holds `imageData`, the image is that: its uri is the JSON's + storage.files.EMBEDDED, which
the writer decodes where it reads images (the JSON read with an image file's checks), and its
key is imagePath's (else the JSON's name without .json). Nothing is extracted to disk.

Scale: the launcher reads nothing but, for --format auto, the heads of a few JSONs. Workers
list the input: one task per first-level sub-folder (its largest element: the names in one
sub-folder, ~100 bytes each), then parse one JSON per element: memory is one file, at most
MAX_JSON_BYTES read and parsed (json's objects: ~2-8x the text of the shapes; imageData is
one string), and the ImageAnnotation it yields is that image's objects. Nothing gathers
per-image state.
"""
from __future__ import annotations

import json
import math
import posixpath
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput, is_hidden
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import (EMBEDDED, exists, list_dir, list_tree,
                                          open_read, read_text)
from beam_tfrecord.records import masks

# Budgets of one LabelMe JSON. imageData (base64, 4/3 of the image) makes files large: 64 MB
# holds a 48 MB photo. LabelMe nests 5 deep (file/shapes/shape/points/point); flags and
# extra keys a little more.
MAX_JSON_BYTES = 64 << 20
MAX_JSON_DEPTH = 32
# --format auto: how much of a JSON's head, and how many JSONs, the launcher reads.
DETECT_HEAD_BYTES = 64 << 10
DETECT_FILES = 8
DETECT_FOLDERS = 64  # folders listed per level

IGNORE_LABEL = "__ignore__"  # labelme2coco's ignore regions: not a class
BOX_SHAPES = ("rectangle", "polygon")


# ---------------------------------------------------------------------------------------------
# Pure functions: one LabelMe document


def _depth_over(value: Any, limit: int) -> bool:
  stack = [(value, 1)]
  while stack:
    node, depth = stack.pop()
    if depth > limit:
      return True
    if isinstance(node, dict):
      stack.extend((v, depth + 1) for v in node.values())
    elif isinstance(node, list):
      stack.extend((v, depth + 1) for v in node)
  return False


def load_json(data: bytes) -> Dict[str, Any]:
  """The top-level object of one LabelMe file of at most MAX_JSON_BYTES nesting at most
  MAX_JSON_DEPTH; InputError ('too_large', 'too_deep', 'malformed_json', 'not_labelme')."""
  if len(data) > MAX_JSON_BYTES:
    raise InputError("parse", "too_large", f"the JSON file has {len(data)} bytes, over the "
                     f"{MAX_JSON_BYTES} a LabelMe file may have")
  try:
    doc = json.loads(data.decode("utf-8-sig"))
  except RecursionError:  # json's recursion gives up before our walk could
    raise InputError("parse", "too_deep", f"the JSON nests deeper than {MAX_JSON_DEPTH}") \
        from None
  except (UnicodeDecodeError, ValueError) as e:
    raise InputError("parse", "malformed_json", f"{type(e).__name__}: {e}") from None
  if not isinstance(doc, dict):
    raise InputError("parse", "not_labelme", f"the JSON is a {type(doc).__name__}, not an "
                     "object with `shapes`: not a LabelMe file")
  if "shapes" not in doc:
    keys = ", ".join(sorted(doc)[:6]) or "none"
    raise InputError("parse", "not_labelme", f"the JSON has no `shapes` (its keys: {keys}): "
                     "not a LabelMe file")
  if _depth_over(doc, MAX_JSON_DEPTH):
    raise InputError("parse", "too_deep", f"the JSON nests deeper than {MAX_JSON_DEPTH}")
  if not isinstance(doc["shapes"], list):
    raise InputError("parse", "malformed_json", f"`shapes` is a {type(doc['shapes']).__name__}"
                     ", not a list")
  return doc


def _number(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def shape_points(shape: Dict[str, Any], what: str) -> List[Tuple[float, float]]:
  """A shape's points as (x, y) floats; InputError 'malformed_shape' for anything else."""
  points = shape.get("points")
  if not isinstance(points, list) or not points:
    raise InputError("parse", "malformed_shape", f"{what} has no `points` list")
  result = []
  for point in points:
    if not (isinstance(point, list) and len(point) == 2 and all(map(_number, point))):
      raise InputError("parse", "malformed_shape",
                       f"{what}: a point must be [x, y] finite numbers, got {point!r:.60}")
    result.append((float(point[0]), float(point[1])))
  return result


def shape_polygon(shape_type: str, points: Sequence[Tuple[float, float]],
                  what: str) -> List[float]:
  """The outline of a box shape as [x1, y1, x2, y2, ...]: a rectangle's four corners (its two
  points in any order; more points: their bounding box), a polygon's points."""
  if shape_type == "rectangle":
    if len(points) < 2:
      raise InputError("parse", "malformed_shape", f"{what}: a rectangle needs 2 points, got "
                       f"{len(points)}")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
    return [x0, y0, x1, y0, x1, y1, x0, y1]
  if len(points) < 3:
    raise InputError("parse", "malformed_shape", f"{what}: a polygon needs 3 points or more, "
                     f"got {len(points)}")
  return [v for point in points for v in point]


def parse_shapes(shapes: Sequence[Any], include_masks: bool = False, where: str = "the file"
                 ) -> Tuple[List[ObjectAnnotation], List[Tuple[str, InputError]]]:
  """The objects of a LabelMe `shapes` list, in the order of their first shape, and
  (level, error) for every shape or group that is not one: 'object' for a malformed shape or
  a group of mixed labels, 'warning' for an unsupported shape type. Shapes with one integer
  group_id are one object (union of boxes; with include_masks, its polygons as the parts of
  one COCO segmentation); `__ignore__` shapes are skipped. `where` names the file in the
  messages."""
  groups: Dict[Any, List[Tuple[str, List[float], int]]] = {}
  problems: List[Tuple[str, InputError]] = []
  for index, shape in enumerate(shapes):
    what = f"shape {index}"
    if not isinstance(shape, dict):
      problems.append(("object", InputError("parse", "malformed_shape",
                                            f"{what} is a {type(shape).__name__}, not an "
                                            "object")))
      continue
    label = shape.get("label")
    if not isinstance(label, str) or not label.strip():
      problems.append(("object", InputError("parse", "missing_label",
                                            f"{what} has no label (got {label!r:.40})")))
      continue
    what = f"shape {index} ({label!r})"
    if label == IGNORE_LABEL:
      continue
    # labelme 3.x before shape types wrote polygons only, without the key
    shape_type = shape.get("shape_type") or "polygon"
    if not isinstance(shape_type, str):
      problems.append(("object", InputError("parse", "malformed_shape",
                                            f"{what}: shape_type is {shape_type!r:.40}")))
      continue
    if shape_type not in BOX_SHAPES:
      problems.append(("warning", InputError(
          "parse", "unsupported_shape", f"{what} of {where} is a {shape_type!r} shape: only "
          "rectangle and polygon shapes become objects; it is not converted")))
      continue
    group_id = shape.get("group_id")
    if group_id is not None and (not isinstance(group_id, int) or isinstance(group_id, bool)):
      problems.append(("object", InputError("parse", "malformed_shape",
                                            f"{what}: group_id is {group_id!r:.40}, not an "
                                            "integer or null")))
      continue
    try:
      outline = shape_polygon(shape_type, shape_points(shape, what), what)
    except InputError as e:
      problems.append(("object", e))
      continue
    key = ("group", group_id) if group_id is not None else ("shape", index)
    groups.setdefault(key, []).append((label, outline, index))
  objects = []
  for (kind, group_id), members in groups.items():
    labels = sorted({label for label, _, _ in members})
    if len(labels) > 1:
      problems.append(("object", InputError(
          "validate", "mixed_group_labels",
          f"group_id {group_id} joins shapes {[i for _, _, i in members]} of different labels "
          f"{labels}: one object has one label; the group is not converted")))
      continue
    xs = [v for _, outline, _ in members for v in outline[0::2]]
    ys = [v for _, outline, _ in members for v in outline[1::2]]
    segmentation = (masks.to_json([outline for _, outline, _ in members])
                    if include_masks else None)
    objects.append(ObjectAnnotation(label=labels[0],
                                    box=Box(min(xs), min(ys), max(xs), max(ys)),
                                    segmentation=segmentation))
  return objects, problems


def image_size(doc: Dict[str, Any]) -> Tuple[Optional[int], Optional[int]]:
  """(imageWidth, imageHeight) when both are positive integers (the header decides anyway)."""
  size = doc.get("imageWidth"), doc.get("imageHeight")
  if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
    return size
  return None, None


_DRIVE = re.compile(r"^[A-Za-z]:/")


def image_name(doc: Dict[str, Any]) -> Optional[str]:
  """imagePath with '/' separators (LabelMe on Windows wrote '\\'), or None when absent."""
  value = doc.get("imagePath")
  if not isinstance(value, str) or not value.strip():
    return None
  return value.replace("\\", "/")


def image_candidates(json_relative: str, image_path: str, separate_root: bool
                     ) -> List[str]:
  """Names relative to the image root the image of a JSON (at `json_relative` under the
  input folder) may be at, in order. Without a separate root (the input folder is the image
  root): imagePath joined to the JSON's folder, then its base name beside the JSON; with one
  (--images): the base name under the JSON's sub-folder, then directly in the root. An
  absolute imagePath (the annotator's machine) is tried by its base name only."""
  folder = posixpath.dirname(json_relative)
  base = posixpath.basename(image_path.rstrip("/"))
  beside = posixpath.join(folder, base) if folder else base
  if separate_root:
    return list(dict.fromkeys([beside, base]))
  if image_path.startswith("/") or _DRIVE.match(image_path) or paths.is_remote(image_path):
    return [beside]
  joined = posixpath.normpath(posixpath.join(folder, image_path)) if folder else image_path
  return list(dict.fromkeys([joined, beside]))


# ---------------------------------------------------------------------------------------------
# --format auto: the head of a JSON


def head_keys(head: bytes) -> Tuple[List[str], List[str]]:
  """(top-level keys, keys of the first element of `shapes`) found in the first bytes of a
  JSON (the rest may be cut off)."""
  import ijson
  top: List[str] = []
  first_shape: List[str] = []
  depth, in_shapes, shape_index = 0, False, -1
  try:
    for n, (event, value) in enumerate(ijson.basic_parse(head)):
      if n == 0 and event != "start_map":
        break
      if event in ("start_map", "start_array"):
        depth += 1
        if in_shapes and depth == 3:
          shape_index += 1
      elif event in ("end_map", "end_array"):
        depth -= 1
        if depth == 1:
          in_shapes = False
      elif event == "map_key" and depth == 1:
        top.append(value)
        in_shapes = value == "shapes"
      elif event == "map_key" and in_shapes and depth == 3 and shape_index == 0:
        first_shape.append(value)
  except Exception:  # cut off, or not JSON: what was seen so far
    pass
  return top, first_shape


def is_labelme_head(head: bytes) -> bool:
  """A LabelMe file's head: top-level `shapes`, and `imagePath` at the top or, when the
  shapes run past the head, a first shape with `label` and `points` (COCO has no `shapes`)."""
  top, first_shape = head_keys(head)
  if "shapes" not in top:
    return False
  return "imagePath" in top or {"label", "points"} <= set(first_shape)


def _read_head(uri: str) -> bytes:
  with open_read(uri) as f:
    return f.read(DETECT_HEAD_BYTES)


def detect(path: str) -> Optional[str]:
  """--format auto: a folder with LabelMe JSONs in it or at most 2 levels below (the first
  DETECT_FILES .json files by level and name, heads only)."""
  found: List[str] = []
  level = [path]
  for _ in range(3):  # the folder, then 2 levels below
    below = []
    for folder in level[:DETECT_FOLDERS]:
      subdirs, names = list_dir(folder)
      found += [paths.join(folder, n) for n in names
                if n.lower().endswith(".json") and not n.startswith(".")]
      below += [paths.join(folder, d) for d in subdirs if not d.startswith(".")]
    if len(found) >= DETECT_FILES or not below:
      break
    level = below
  for uri in found[:DETECT_FILES]:
    try:
      if is_labelme_head(_read_head(uri)):
        return "LabelMe JSONs"
    except Exception:  # unreadable: not evidence either way
      continue
  return None


# ---------------------------------------------------------------------------------------------
# The transform


def _list_tasks(task: Tuple[Optional[str], str, Optional[str]]):
  """(split, input folder, image root) -> (split, input, image root, sub-folder or '' for the
  folder's own files): the listing is spread over first-level sub-folders."""
  split, root, images = task
  subdirs, _ = list_dir(root)
  yield split, root, images, ""
  for d in subdirs:
    if not is_hidden(d):
      yield split, root, images, d


def _list_json(task) -> List[Tuple[Optional[str], str, Optional[str], str]]:
  """(split, input, image root, sub-folder) -> (split, input, image root, JSON relative to
  the input) for each visible .json there (any case)."""
  split, root, images, sub = task
  if not sub:
    names = list_dir(root)[1]
  else:
    names = [posixpath.join(sub, rel) for rel in list_tree(paths.join(root, sub))]
  return [(split, root, images, rel) for rel in names
          if rel.lower().endswith(".json") and not is_hidden(rel)]


class _ParseJson(beam.DoFn):
  """(split, input, image root, JSON relative) -> ImageAnnotation, and ErrorRecords."""

  def __init__(self, allow_absolute: bool, follow_symlinks: bool, include_masks: bool):
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def _locate(self, root: str, names: Sequence[str], probe: bool) -> Tuple[str, str, bool]:
    """(key, uri, found) of the first candidate that resolves inside the root and exists;
    existence is probed only when it decides something (several candidates, or imageData to
    fall back on). When none exists: the first candidate's refusal (a name leaving the
    root), else the first candidate, for locate to report as missing."""
    resolved, refused = [], []
    for name in names:
      try:
        resolved.append(paths.resolve(root, name, self.allow_absolute, self.follow_symlinks))
      except InputError as e:
        refused.append((name, e))
    if len(names) == 1 and resolved and not probe:
      return resolved[0] + (True,)
    for key, uri in resolved:
      if exists(uri):
        return key, uri, True
    if refused and refused[0][0] == names[0]:
      e = refused[0][1]
      raise InputError(e.stage, e.reason, f"{e.message}; give the folder holding both the "
                       "JSONs and the images as --input, or --images DIR")
    return resolved[0] + (False,)

  def process(self, task):
    try:
      yield from self._parse(task)
    except Exception as e:  # unforeseen: report it, never kill the job
      uri = paths.join(task[1], task[3])
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=uri, level="file",
          message=f"{type(e).__name__}: {e}"))

  def _parse(self, task):
    split, input_root, image_root, rel = task
    uri = paths.join(input_root, rel)
    try:
      doc = load_json(read_text(uri, MAX_JSON_BYTES))
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except Exception as e:  # unreadable (permissions, network): report, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unreadable", key=uri, level="file",
          message=f"{type(e).__name__}: {e}"))
      return
    name = image_name(doc)
    data = doc.get("imageData")
    has_data = isinstance(data, str) and bool(data)
    size = None
    if name is None and not has_data:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="missing_field", key=uri, level="file",
          message="the file has no imagePath and no imageData: its image is unknown"))
      return
    if name is None:  # the image is only in imageData: named after the JSON
      key, image_uri, found = posixpath.splitext(rel)[0], uri, False
    else:
      names = image_candidates(rel, name, image_root is not None)
      try:
        key, image_uri, found = self._locate(image_root or input_root, names, has_data)
      except InputError as e:
        yield beam.pvalue.TaggedOutput("errors", e.record(uri, name))
        return
    if not found and has_data:
      # the image file is not there: its bytes come from imageData, decoded by the writer
      # (storage/files.read_bytes of the JSON's uri + EMBEDDED, with an image file's checks)
      image_uri, size = uri + EMBEDDED, len(data) * 3 // 4
    objects, problems = parse_shapes(doc["shapes"], self.include_masks, uri)
    for level, error in problems:
      yield beam.pvalue.TaggedOutput("errors", error.record(uri, key, level=level))
    width, height = image_size(doc)
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=tuple(objects), split=split, width=width, height=height,
                          size_bytes=size)


class ReadLabelMe(beam.PTransform):
  """Folders of LabelMe JSONs -> SourceOutput.

  In: (split or None, input folder, image root or None) per --input; a None image root means
  the input folder, with imagePath relative to each JSON. Out: one ImageAnnotation per JSON
  (absolute pixel boxes; with include_masks, each object's polygons as a COCO polygon list),
  the size the JSON claims, its split; ErrorRecords for unreadable or foreign JSONs (file),
  missing or imageData-only images (image), bad shapes and mixed groups (object) and
  unsupported shapes (warning). No categories: class ids are the sorted names'.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, Optional[str]]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def expand(self, root):
    parsed = (root
              | "Inputs" >> beam.Create(self.inputs)
              | "Folders" >> beam.FlatMap(_list_tasks)
              | "SpreadFolders" >> beam.Reshuffle()
              | "ListJson" >> beam.FlatMap(_list_json)
              | "Spread" >> beam.Reshuffle()
              | "Parse" >> beam.ParDo(_ParseJson(
                  self.allow_absolute, self.follow_symlinks, self.include_masks)).with_outputs(
                      "errors", main="images"))
    return SourceOutput(images=parsed.images, errors=parsed.errors)


# --- the source protocol (sources/registry.py) ---

MASKS = True  # polygons (and rectangles) become masks with --include-masks
EXPORT_WHAT = "LabelMe JSONs"  # what each split folder of an export holds


def _assigned(inputs: Sequence[str]) -> List[Tuple[Optional[str], str]]:
  from beam_tfrecord.errors import UsageError
  assigned = [paths.parse_assignment(item) for item in inputs]
  if len(assigned) > 1 and not all(split for split, _ in assigned):
    raise UsageError(f"--format labelme takes one --input (a folder of LabelMe JSONs), or one "
                     f"SPLIT=DIR per split; got {len(inputs)} inputs")
  return assigned


def _has_json(root: str) -> Optional[bool]:
  """Whether a local folder holds a .json anywhere below (stops at the first); None for an
  object store (not listed on the launcher)."""
  if paths.is_remote(root):
    return None
  import os
  for folder, dirs, names in os.walk(root):
    dirs[:] = [d for d in dirs if not d.startswith(".")]
    if any(n.lower().endswith(".json") and not n.startswith(".") for n in names):
      return True
  return False


def check(config) -> None:
  """Each input is a folder holding LabelMe JSONs (a local one is walked to its first .json)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.checks import check_directory
  for _, root in _assigned(config.inputs):
    check_directory(root, "--input")
    if _has_json(root) is False:
      raise UsageError(f"--input {root} holds no .json file: not a folder of LabelMe JSONs")


def possible_splits(config) -> Optional[set]:
  return {split or DEFAULT_SPLIT for split, _ in _assigned(config.inputs)}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = config.input_image_roots()  # (split, folder, its --images or None)
  _assigned(config.inputs)
  source = root | "ReadLabelMe" >> ReadLabelMe(
      inputs, config.allow_absolute_paths, config.follow_symlinks, config.include_masks)
  return source, sorted(split for split, _, _ in inputs if split)


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Everything below each input folder (JSONs and, without --images, the images)."""
  return [("tree", paths.join(paths.parse_assignment(item)[1], "**"))
          for item in config.inputs], []

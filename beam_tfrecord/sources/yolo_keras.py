"""keras-yolo3 annotation text: one image a line, `path x_min,y_min,x_max,y_max,class_id ...`.

What qqwweee/keras-yolo3's voc_annotation.py writes (`2007_train.txt`, absolute paths of
VOCdevkit/VOC2007/JPEGImages/*.jpg) and its coco_annotation.py (`train.txt`, paths relative to
where it ran), and what Roboflow's "YOLO Keras TXT" export puts in each split folder
(`_annotations.txt` naming the images beside it, with `_classes.txt`). Box values are pixels
(integers as keras-yolo3 writes them; decimals are read too), class_id a 0-based index into
the class names (--classes-file, one name a line: model_data/voc_classes.txt; default
`_classes.txt` beside the annotation file). Class i becomes label id i + 1 (0 is background
in the TF OD API), or i under a schema whose ids start at 0. A line with a path and no boxes
is an image without objects (voc_annotation.py writes one when every object is difficult).

Paths are relative to the annotation file's folder (or --images). Absolute paths, which
voc_annotation.py writes, are read as they are with --allow-absolute-paths, and refused
otherwise: a usage error when the first line has one (the whole file is then written so), an
image-level 'absolute_path' error naming the option for a later line. keras-yolo3 splits a
line on whitespace, so a path with a space cannot be written in this format: such a line is
a malformed_line whose message says so. A line's split is the file's: its SPLIT= prefix, else
a split word in the file name (2007_train.txt, 2007_val.txt), else for `_annotations.txt` its
folder's name (train/, valid/), else the run's default.

Errors: a line that is no `path box ...` (or longer than MAX_LINE_BYTES, or not UTF-8) is an
image-level malformed_line at its line, one of more than sources.base.MAX_OBJECTS_PER_IMAGE
boxes a too_many_objects; a class id out of range an object-level class_out_of_range (the
line's other boxes are kept); an unreadable file a file-level error.

Reading: one line is one image, so no grouping is needed. A file over SPLIT_BYTES is cut into
byte ranges read by any worker (each line belongs to the range it starts in); error line
numbers come from the line counts of the ranges before (a side input of one entry per range,
storage.lines). Largest element: one line (MAX_LINE_BYTES); memory: one line per worker,
the class names (at most MAX_CLASSES_BYTES) and the range counts (file size / 64 MB).
"""
from __future__ import annotations

import posixpath
import re
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import apache_beam as beam

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE, SourceOutput
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import (exists, is_dir, list_dir, open_read,
                                         parent, read_text)
from beam_tfrecord.storage.lines import (SPLIT_BYTES, file_error, file_size,
                                         line_numbers, ranges)
from beam_tfrecord.storage.lines import read_lines as read_range_lines

EXPORT_FILE = "_annotations.txt"  # the file in each split folder of a Roboflow export
CLASSES_BESIDE = "_classes.txt"   # the class names beside it (the default --classes-file)
SPLIT_WORDS = ("train", "trainval", "val", "valid", "validation", "test")
EXPORT_SPLITS = ("train", "valid", "val", "validation", "test")

# Budgets: a line holds one image's boxes (~20 bytes each: 1 MB is ~50,000 boxes); a class
# file ~20 bytes a name (1 MB: ~50,000 classes); a file over SPLIT_BYTES (storage.lines' 64 MB:
# COCO train2017's ~25 MB file is one range) is read in ranges by many workers.
MAX_LINE_BYTES = 1 << 20
MAX_CLASSES_BYTES = 1 << 20
DETECT_HEAD_BYTES = 64 << 10  # --format auto and check read at most this much of a file
DETECT_LINES = 20             # ... and look at this many lines of it

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_BOX = re.compile(rf"^({_NUMBER}),({_NUMBER}),({_NUMBER}),({_NUMBER}),([-+]?\d+)$")
_LOOKS_NUMERIC = re.compile(r"^[-+\d.,eE]+$")
ABSOLUTE_HINT = ("keras-yolo3's voc_annotation.py writes absolute paths: pass "
                 "--allow-absolute-paths to read them as they are")


# ---------------------------------------------------------------------------------------------
# Pure functions: class names, lines


def parse_classes(text: str) -> Tuple[str, ...]:
  """The class names of a classes file, line i = class i (keras-yolo3's get_classes: each line
  stripped). Trailing blank lines are ignored; ValueError for no names, a blank line between
  names (it would shift every index after it) or a name given twice."""
  lines = text.splitlines()
  while lines and not lines[-1].strip():
    lines.pop()
  names = [line.strip() for line in lines]
  if not names:
    raise ValueError("it names no classes")
  for number, name in enumerate(names, start=1):
    if not name:
      raise ValueError(f"line {number} is blank: class ids are line numbers from 0, so a "
                       "blank line would shift every class after it")
    if names.index(name) != number - 1:
      raise ValueError(f"line {number} repeats the class {name!r} of line "
                       f"{names.index(name) + 1}")
  return tuple(names)


def parse_line(text: str, names: Optional[Sequence[str]]
               ) -> Optional[Tuple[str, List[ObjectAnnotation], List[InputError]]]:
  """(image path, objects, object errors) of one annotation line; None for a blank line.
  InputError 'malformed_line' for a line that is no `path box box ...`, 'too_many_objects'
  for more than MAX_OBJECTS_PER_IMAGE boxes (the image is not converted); a class id out of range of `names` is an object error ('class_out_of_range')
  and the other boxes are kept. `names` None: class ids are not checked (detect)."""
  tokens = text.split()
  if not tokens:
    return None
  path, objects, errors = tokens[0], [], []
  if _BOX.match(path) or (_LOOKS_NUMERIC.match(path) and "," in path):
    raise InputError("parse", "malformed_line",
                     f"the line starts with {path[:80]!r}, a box, not an image path")
  if len(tokens) - 1 > MAX_OBJECTS_PER_IMAGE:  # none is built
    raise InputError("parse", "too_many_objects",
                     f"{path[:200]} has {len(tokens) - 1:,} boxes, more than the "
                     f"{MAX_OBJECTS_PER_IMAGE:,} one image may have: the image is not converted")
  for token in tokens[1:]:
    match = _BOX.match(token)
    if match is None:
      hint = ("; a path with a space cannot be written in this format (keras-yolo3 splits "
              "lines on whitespace)" if "," not in token else "")
      raise InputError("parse", "malformed_line",
                       f"{token[:80]!r} after {path[:200]!r} is not a box "
                       f"x_min,y_min,x_max,y_max,class_id{hint}")
    x_min, y_min, x_max, y_max = (float(match.group(i)) for i in range(1, 5))
    class_id = int(match.group(5))
    if names is not None and not 0 <= class_id < len(names):
      errors.append(InputError(
          "validate", "class_out_of_range",
          f"class id {class_id} of box {token} is out of range: the classes file names "
          f"{len(names)} classes (0..{len(names) - 1})"))
      continue
    label = names[class_id] if names is not None else str(class_id)
    objects.append(ObjectAnnotation(label=label, box=Box(x_min, y_min, x_max, y_max)))
  return path, objects, errors


def is_absolute(name: str) -> bool:
  """A POSIX or a Windows absolute path, or a URI."""
  return (name.startswith("/") or paths.is_remote(name)
          or bool(re.match(r"^[A-Za-z]:[\\/]", name)))


def read_lines(fileobj, start: int, end: int, limit: Optional[int] = None
               ) -> Iterator[Tuple[int, Union[str, InputError]]]:
  """(n, text) for the n-th line (from 1) that starts in [start, end) of a file opened in
  binary, or (n, InputError) for a line over `limit` bytes ('too_large') or not UTF-8
  ('malformed_line'). A line that starts before `start` belongs to the range before, so the
  lines do not depend on where the ranges are cut (storage.lines). Memory: one line. `limit`:
  MAX_LINE_BYTES."""
  limit = MAX_LINE_BYTES if limit is None else limit
  for number, raw in read_range_lines(fileobj, start, end, limit + 1):
    if raw is None:
      yield number, InputError("parse", "too_large", f"the line is longer than {limit} bytes: "
                               "not a keras-yolo3 annotation line")
      continue
    try:
      text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      yield number, InputError("parse", "malformed_line", f"the line is not UTF-8: {e}")
      continue
    yield number, text.lstrip("\ufeff") if start == 0 and number == 1 else text


def split_of(split: Optional[str], uri: str) -> Optional[str]:
  """The SPLIT= prefix, else a split word of the file name (2007_train.txt), else for
  _annotations.txt its folder's name when it is a split's (Roboflow), else None."""
  if split:
    return split
  text = uri.replace("\\", "/").rstrip("/")
  name = posixpath.basename(text)
  words = re.split(r"[-_.]", name.lower())
  found = next((w for w in words if w in SPLIT_WORDS), None)
  if found:
    return found
  folder = posixpath.basename(posixpath.dirname(text))
  if name == EXPORT_FILE and folder.lower() in EXPORT_SPLITS:
    return folder
  return None


# ---------------------------------------------------------------------------------------------
# The transform


class _PlanText(beam.DoFn):
  """(split, uri, image root) -> (split, uri, image root, start, end): the whole file when it
  has at most `split_bytes`, else byte ranges of `split_bytes`. Largest element: one range."""

  def __init__(self, split_bytes: int):
    self.split_bytes = split_bytes

  def process(self, task):
    split, uri, image_root = task
    size = file_size(uri)
    if size is None or size <= self.split_bytes:  # a missing file: its read reports it
      yield split, uri, image_root, 0, size if size is not None else 1 << 62
      return
    for start, end in ranges(size, self.split_bytes):
      yield split, uri, image_root, start, end


class _ReadLines(beam.DoFn):
  """A range from _PlanText -> one ImageAnnotation per line. Tagged:
    row_errors  (uri, start, n, ErrorRecord) of a line, its file line to complete;
    lines       (uri, (start, lines read, 0)) per range;
    errors      a file's ErrorRecord (unreadable).
  Largest element: one line's image; memory: one line."""

  def __init__(self, names: Sequence[str], allow_absolute: bool, follow_symlinks: bool):
    self.names = tuple(names)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks

  def process(self, part):
    split, uri, image_root, start, end = part
    last = 0
    try:
      with open_read(uri) as f:
        for n, text in read_lines(f, start, end):
          last = n
          for item in image_of_line(text, uri, image_root, split, self.names,
                                    self.allow_absolute, self.follow_symlinks):
            if type(item) is ErrorRecord:
              yield beam.pvalue.TaggedOutput("row_errors", (uri, start, n, item))
            else:
              yield item
    except (InputError, OSError) as e:
      yield beam.pvalue.TaggedOutput("errors", file_error(uri, e))
    yield beam.pvalue.TaggedOutput("lines", (uri, (start, last, 0)))


def image_of_line(text: Union[str, InputError], uri: str, image_root: str, split: Optional[str],
                  names: Sequence[str], allow_absolute: bool = False,
                  follow_symlinks: bool = False) -> Iterator[Union[ImageAnnotation, ErrorRecord]]:
  """The image of one line (from read_lines) and its ErrorRecords (source `uri`, the caller
  adds the line): malformed or unsafe lines at image level, bad boxes at object level."""
  if isinstance(text, InputError):
    yield text.record(uri, uri, level="image")
    return
  try:
    parsed = parse_line(text, names)
  except InputError as e:
    yield e.record(uri, text.split()[0], level="image")
    return
  if parsed is None:
    return
  name, objects, errors = parsed
  try:
    if is_absolute(name) and not allow_absolute:
      raise InputError("locate", "absolute_path",
                       f"{name!r} is an absolute path; {ABSOLUTE_HINT}")
    key, image_uri = paths.resolve(image_root, name, allow_absolute, follow_symlinks)
  except InputError as e:
    yield e.record(uri, name, level="image")
    return
  for error in errors:
    yield error.record(uri, key, level="object")
  yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                        objects=tuple(objects), split=split)


class ReadYoloKeras(beam.PTransform):
  """keras-yolo3 annotation files -> SourceOutput.

  In: `inputs`, a list of (split or None, annotation uri, image root), the class names (line
  i of the classes file is class i) and the id of the first class (1 for the TF OD API).
  Out: one ImageAnnotation per line (pixel boxes, in line order; a line without boxes is an
  image without objects), the (name, id) of every class in the file's order, and
  ErrorRecords at their file line (see the module docstring).
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]], names: Sequence[str],
               first_id: int = 1, allow_absolute: bool = False, follow_symlinks: bool = False,
               in_process: bool = False, split_bytes: int = SPLIT_BYTES):
    super().__init__()
    self.inputs, self.names, self.first_id = list(inputs), tuple(names), first_id
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.in_process, self.split_bytes = in_process, split_bytes

  def expand(self, root):
    parts = (root | "Files" >> beam.Create(self.inputs)
             | "Plan" >> beam.ParDo(_PlanText(self.split_bytes)))
    if not self.in_process:  # the in-process runner would only hold them in memory
      parts = parts | "SpreadParts" >> beam.Reshuffle()
    read = parts | "Read" >> beam.ParDo(_ReadLines(
        self.names, self.allow_absolute, self.follow_symlinks)).with_outputs(
            "row_errors", "lines", "errors", main="images")
    _, row_errors = line_numbers(read.lines, read.row_errors)
    categories = root | "Classes" >> beam.Create(
        [(name, i + self.first_id) for i, name in enumerate(self.names)])
    return SourceOutput(images=read.images,
                        errors=(read.errors, row_errors) | "Errors" >> beam.Flatten(),
                        categories=categories)


# ---------------------------------------------------------------------------------------------
# The launcher: inputs, classes, checks


def inputs_of(config) -> List[Tuple[Optional[str], str, str]]:
  """(split, annotation file, image root) of each --input: a folder stands for its
  _annotations.txt; the root is --images, else the annotation file's folder."""
  result = []
  for split, uri, root in config.input_image_roots():
    if is_dir(uri):
      uri = paths.join(uri, EXPORT_FILE)
    result.append((split_of(split, uri), uri, root or parent(uri)))
  return result


def load_classes(uri: str, what: str) -> Tuple[str, ...]:
  from beam_tfrecord.sources.checks import check_file
  check_file(uri, what)
  try:
    return parse_classes(read_text(uri, MAX_CLASSES_BYTES).decode("utf-8-sig"))
  except (InputError, ValueError, OSError) as e:  # UnicodeDecodeError is a ValueError
    raise UsageError(f"{what} {uri}: {e.message if isinstance(e, InputError) else e}") from None


def class_names(config) -> Tuple[str, ...]:
  """--classes-file, else the _classes.txt beside each input (all naming the same classes);
  UsageError when there is none or they differ."""
  if config.classes_file:
    return load_classes(config.classes_file, "--classes-file")
  found = {}
  for _, uri, _ in inputs_of(config):
    beside = paths.join(parent(uri), CLASSES_BESIDE)
    if not exists(beside):
      raise UsageError(f"--format yolo-keras needs --classes-file FILE (the class names, one a "
                       f"line, e.g. model_data/voc_classes.txt): there is no {CLASSES_BESIDE} "
                       f"beside {uri}")
    found[beside] = load_classes(beside, "class names file")
  if len(set(found.values())) > 1:
    raise UsageError(f"the {CLASSES_BESIDE} files of the inputs name different classes "
                     f"({', '.join(found)}); give one --classes-file")
  return next(iter(found.values()))


def _head_lines(uri: str, limit: int = DETECT_HEAD_BYTES) -> List[str]:
  """The complete lines of the first `limit` bytes of a file (the last one only when the
  file ends within them), at most DETECT_LINES non-blank ones."""
  from beam_tfrecord.storage.files import head
  data = head(uri, limit + 1)
  text = data[:limit].decode("utf-8-sig", "replace")
  lines = text.splitlines()
  if len(data) > limit and lines:
    lines.pop()  # cut by the head
  return [line for line in lines if line.strip()][:DETECT_LINES]


def check_input(uri: str, allow_absolute: bool) -> None:
  """Before running: the file exists and its first line reads as an annotation line whose
  path is relative, or absolute with --allow-absolute-paths (reads the head only)."""
  from beam_tfrecord.sources.checks import check_file
  check_file(uri, "--input")
  # a first line of thousands of boxes (~20 bytes each) outgrows the head: read it whole
  lines = _head_lines(uri) or _head_lines(uri, MAX_LINE_BYTES)
  if not lines:
    raise UsageError(f"--input {uri} has no annotation lines: no images to convert")
  try:
    name = parse_line(lines[0], None)[0]
  except InputError as e:
    if e.reason == "too_many_objects":  # keras-yolo3 text still: the run rejects that image
      name = lines[0].split()[0]
    else:
      raise UsageError(f"--input {uri} is not keras-yolo3 annotation text (path x_min,y_min,"
                       f"x_max,y_max,class_id ...): its first line: {e.message}") from None
  if is_absolute(name) and not allow_absolute:
    raise UsageError(f"--input {uri}: its first line names the absolute path {name}; "
                     f"{ABSOLUTE_HINT}")


def looks_like(lines: Sequence[str]) -> bool:
  """Every line is `image path box ...` (an image file extension; a Darknet list's lines are
  paths only and YOLO label lines are numbers) and at least one has a box."""
  from beam_tfrecord.sources.base import image_extensions
  extensions = image_extensions()
  boxes = 0
  for line in lines:
    try:
      parsed = parse_line(line, None)
    except InputError:
      return False
    if parsed is None:
      continue
    name, objects, _ = parsed
    if posixpath.splitext(name.replace("\\", "/"))[1].lower() not in extensions:
      return False
    boxes += len(objects)
  return boxes > 0


def detect(path: str) -> Optional[str]:
  """--format auto: a folder holding _annotations.txt (Roboflow), that file itself, or a
  .txt whose first lines are `image path box ...` with at least one box."""
  name = posixpath.basename(path.replace("\\", "/").rstrip("/"))
  if is_dir(path):
    return EXPORT_FILE if EXPORT_FILE in list_dir(path)[1] else None
  if name == EXPORT_FILE:
    return EXPORT_FILE
  if not name.lower().endswith(".txt"):
    return None
  return "keras-yolo3 annotation text" if looks_like(_head_lines(path)) else None


# --- the source protocol (sources/registry.py) ---

MASKS = False
OPTIONS = ("classes_file",)  # one class name a line
EXPORT_WHAT = EXPORT_FILE


def check(config) -> None:
  for _, uri, _ in inputs_of(config):
    check_input(uri, config.allow_absolute_paths)
  class_names(config)


def possible_splits(config) -> Optional[set]:
  splits = [split for split, _, _ in inputs_of(config)]
  return set(splits) if all(splits) else None


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = inputs_of(config)
  source = root | "ReadYoloKeras" >> ReadYoloKeras(
      inputs, class_names(config), first_id, config.allow_absolute_paths,
      config.follow_symlinks, in_process=local)
  return source, sorted({split for split, _, _ in inputs if split})


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotation file and the classes file(s); the image roots (default: each annotation
  file's folder). Absolute paths outside them are not listed."""
  inputs = inputs_of(config)
  patterns = [("file", uri) for _, uri, _ in inputs]
  if config.classes_file:
    patterns.append(("file", config.classes_file))
  else:
    patterns += [("file", paths.join(parent(uri), CLASSES_BESIDE)) for _, uri, _ in inputs]
  return patterns, list(dict.fromkeys(root for _, _, root in inputs))


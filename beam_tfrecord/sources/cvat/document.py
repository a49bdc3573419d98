"""CVAT for images 1.1: the `annotations.xml` of a task, job or project export.

The export (a zip unpacked) is `annotations.xml` beside `images/`: a task or job export keeps
each image at images/<name>, a project export at images/<subset>/<name>. The XML holds
`<version>1.1</version>`, then `<meta>` (the `<task>`, `<job>` or `<project>`, its `<labels>`,
and for a task or job its `<subset>`), then one `<image id name [subset task_id] width
height>` per image with its shapes. `<box>` and `<polygon>` become objects (a rotated box:
the box enclosing it); elements of one image sharing a non-zero `group_id` are one object
(the union of their boxes, and with --include-masks of their polygons; a box's mask is its
rectangle). `occluded` becomes image/object/truncated, the only field of the od-api schema
for it; attributes, z_order and source are not kept. `<polyline>`, `<points>`, `<tag>`,
`<skeleton>`, `<ellipse>`, `<cuboid>`, `<mask>` and any other element are reported
(unsupported_shape, a warning), `<track>`s (CVAT for video) too (unsupported_track).

A label the meta does not list, an empty label, differing labels in one group are object
errors. The split is the --input's SPLIT= prefix, else the image's `subset` (a project), else
the task's or job's `<subset>`, lower-cased ('Train' -> 'train'; CVAT's 'default' is no
subset: 'train'); a subset that is no valid split name is an image error (bad_subset).

The file is streamed (defusedxml's iterparse, DTDs refused), each `<image>` cleared once read:
memory is one image (at most MAX_ELEMENT_BYTES of XML). A worker first reads the `<meta>` of a
file and cuts the file into byte ranges of RANGE_BYTES (the launcher reads only a HEAD_BYTES
head in check and detect); any worker then reads a range: the images whose `<image` tag starts
in it, each read to its end. An `<image` inside a comment or CDATA would be taken for a tag
there (CVAT writes neither); a file in an encoding that is not ASCII-compatible (UTF-16) is
one range. Largest element: one image's annotation; memory: one image's XML + one 64 kB chunk.
"""
from __future__ import annotations

import dataclasses
import math
import os
import posixpath
import re
from typing import (FrozenSet, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple)

import apache_beam as beam

from beam_tfrecord.records.model import check_split_name
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import exists, is_dir, list_dir, open_read
from beam_tfrecord.records import masks

EXPORT_FILE = "annotations.xml"  # the file of a CVAT export (and of each split folder)
VERSION = "1.1"
SHAPES = ("box", "polygon")  # what becomes an object

# Budgets. The launcher reads HEAD_BYTES of a file (check, detect). One <image> (or the meta
# between two of its labels or tasks) may hold MAX_ELEMENT_BYTES of XML: ElementTree holds up
# to ~45 bytes per byte of tiny elements (voc.MAX_XML_BYTES), ~180 MB at 4 MB, which is ~40,000
# boxes. CVAT nests 8 deep (annotations/meta/project/labels/label/attributes/attribute/name).
HEAD_BYTES = 64 << 10
MAX_ELEMENT_BYTES = 4 << 20
MAX_XML_DEPTH = 32
MAX_LABELS = 1 << 16
RANGE_BYTES = 64 << 20   # a bigger file is read in ranges of this size by any worker
CHUNK_BYTES = 64 << 10   # what the parser is fed at once

_IMAGE_TAG = re.compile(rb"<image[\s/>]")
_HELD = len(b"<image")  # bytes held back from a chunk: a tag may start there
_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
# encodings in which '<image' is these bytes wherever it appears (a file can be cut anywhere)
_ASCII_COMPATIBLE = re.compile(r"(utf-?8|(us-)?ascii|iso-?8859-\d+|latin-?1|(windows|cp)-?125\d)")


@dataclasses.dataclass(frozen=True)
class Meta:
  """What the <meta> of one file says: the export's kind (task, job, project), its label
  names, the task's or job's subset, and how a range of the file is parsed on its own."""
  kind: str
  labels: FrozenSet[str]
  subset: Optional[str] = None
  encoding: str = "utf-8"
  splittable: bool = True


class ParsedImage(NamedTuple):
  """One <image>: its attributes, objects, and (InputError, level) for each element not
  converted (object errors, unsupported shapes as warnings)."""
  name: Optional[str]
  width: Optional[int]
  height: Optional[int]
  subset: Optional[str]
  objects: Tuple[ObjectAnnotation, ...]
  problems: Tuple[Tuple[InputError, str], ...]


# ---------------------------------------------------------------------------------------------
# Pure functions: one image's shapes


def _number(value: Optional[str], what: str) -> float:
  if value is None:
    raise InputError("parse", "missing_field", f"{what} is missing")
  try:
    number = float(value)
  except ValueError:
    raise InputError("parse", "wrong_type", f"{what} is {value!r}, not a number") from None
  if not math.isfinite(number):
    raise InputError("parse", "wrong_type", f"{what} is {value!r}, not a finite number")
  return number


def _size(value: Optional[str], what: str) -> Optional[int]:
  if value is None or value == "":
    return None
  if not re.fullmatch(r"\d+", value.strip()):
    raise InputError("parse", "wrong_type", f"{what} is {value!r}, not a whole number")
  return int(value)


def parse_points(text: Optional[str], what: str) -> List[float]:
  """CVAT's 'x0,y0;x1,y1;...' -> [x0, y0, x1, y1, ...] (InputError when malformed)."""
  if not text or not text.strip():
    raise InputError("parse", "missing_field", f"{what} has no points")
  flat: List[float] = []
  for pair in text.strip().split(";"):
    xy = pair.split(",")
    if len(xy) != 2:
      raise InputError("parse", "malformed_points", f"{what}: {pair!r} is not 'x,y'")
    flat += [_number(v.strip(), f"{what} point") for v in xy]
  return flat


def rotated_corners(xtl: float, ytl: float, xbr: float, ybr: float,
                    degrees: float) -> List[float]:
  """The corners of a box turned `degrees` clockwise on screen about its centre, as CVAT
  turns a rotated box: [x, y, ...] from the top left corner, clockwise."""
  cx, cy = (xtl + xbr) / 2, (ytl + ybr) / 2
  cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
  flat: List[float] = []
  for x, y in ((xtl, ytl), (xbr, ytl), (xbr, ybr), (xtl, ybr)):
    flat += [cx + (x - cx) * cos - (y - cy) * sin, cy + (x - cx) * sin + (y - cy) * cos]
  return flat


class _Shape(NamedTuple):
  group: int
  label: str
  polygon: List[float]   # a box as its 4 corners
  occluded: bool


def parse_shape(element, labels: Optional[FrozenSet[str]]) -> _Shape:
  """One <box> or <polygon> (InputError: empty label missing_label, label not in the meta
  unknown_label, coordinates, occluded or group_id malformed, a polygon of < 3 points)."""
  tag = element.tag
  label = element.get("label")
  if label is None or not label.strip():
    raise InputError("parse", "missing_label", f"a <{tag}> has an empty label")
  what = f"<{tag}> {label!r}"
  if labels is not None and label not in labels:
    raise InputError("validate", "unknown_label",
                     f"{what}: the label is not one of the {len(labels)} labels of <meta>")
  occluded = element.get("occluded", "0")
  if occluded not in ("0", "1"):
    raise InputError("parse", "wrong_type", f"{what}: occluded is {occluded!r}, not 0 or 1")
  group = element.get("group_id", "0")
  if not re.fullmatch(r"\d+", group):
    raise InputError("parse", "wrong_type", f"{what}: group_id is {group!r}, not a number")
  if tag == "box":
    xtl, ytl, xbr, ybr = (_number(element.get(k), f"{what} {k}")
                          for k in ("xtl", "ytl", "xbr", "ybr"))
    rotation = _number(element.get("rotation", "0"), f"{what} rotation")
    polygon = (rotated_corners(xtl, ytl, xbr, ybr, rotation) if rotation % 360 else
               [xtl, ytl, xbr, ytl, xbr, ybr, xtl, ybr])
  else:
    polygon = parse_points(element.get("points"), what)
    if len(polygon) < 6:
      raise InputError("validate", "bad_polygon",
                       f"{what} has {len(polygon) // 2} points; a polygon needs 3")
  return _Shape(int(group), label, polygon, occluded == "1")


def _object(shapes: Sequence[_Shape], include_masks: bool) -> ObjectAnnotation:
  """One object of one shape or of a group: the box around all their points; with masks, the
  polygons (a COCO polygon list, rasterized as their union)."""
  xs = [v for s in shapes for v in s.polygon[0::2]]
  ys = [v for s in shapes for v in s.polygon[1::2]]
  return ObjectAnnotation(
      label=shapes[0].label, box=Box(min(xs), min(ys), max(xs), max(ys)),
      truncated=any(s.occluded for s in shapes),
      segmentation=masks.to_json([s.polygon for s in shapes]) if include_masks else None)


def parse_image(element, labels: Optional[FrozenSet[str]], include_masks: bool = False,
                source: str = "") -> ParsedImage:
  """One <image> element -> ParsedImage. Objects keep the order of their first element. Its
  `width`/`height` are checked here (InputError wrong_type: the image is not converted)."""
  name = element.get("name")
  width = _size(element.get("width"), f"<image> {name!r} width")
  height = _size(element.get("height"), f"<image> {name!r} height")
  problems: List[Tuple[InputError, str]] = []
  order: List[object] = []  # a shape, or a group id in the place of its first shape
  groups = {}
  for child in element:
    tag = child.tag
    if tag not in SHAPES:
      label = child.get("label")
      problems.append((InputError(
          "parse", "unsupported_shape",
          f"<{tag}>{f' {label!r}' if label else ''} of image {name!r} in {source} is not "
          f"converted: only <box> and <polygon> become objects"), "warning"))
      continue
    try:
      shape = parse_shape(child, labels)
    except InputError as e:
      e.message = f"image {name!r}: {e.message}"
      problems.append((e, "object"))
      continue
    if not shape.group:
      order.append(shape)
    else:
      if shape.group not in groups:
        order.append(shape.group)
      groups.setdefault(shape.group, []).append(shape)
  objects = []
  for item in order:
    if isinstance(item, _Shape):
      objects.append(_object([item], include_masks))
      continue
    members = groups[item]
    names = sorted({s.label for s in members})
    if len(names) > 1:
      problems.append((InputError(
          "validate", "group_labels_differ",
          f"image {name!r}: the {len(members)} elements of group_id {item} have the labels "
          f"{names}; one object has one label, so the group is not converted"), "object"))
      continue
    objects.append(_object(members, include_masks))
  return ParsedImage(name, width, height, element.get("subset"), tuple(objects),
                     tuple(problems))


def split_of(subset: Optional[str]) -> Optional[str]:
  """A CVAT subset as a split name: lower-cased, None for none or CVAT's 'default'
  (InputError bad_subset when it cannot name shard files)."""
  if subset is None or not subset.strip() or subset.strip().lower() == "default":
    return None
  name = subset.strip().lower()
  try:
    return check_split_name(name)
  except ValueError:
    raise InputError("parse", "bad_subset",
                     f"subset {subset!r} cannot be a split name (letters, digits, '_', '.', "
                     "'-'); give the --input a SPLIT= prefix") from None


# ---------------------------------------------------------------------------------------------
# Streaming a file, or one byte range of it


def head_version(data: bytes) -> Optional[str]:
  """The <version> of a file head whose root is <annotations> ('' when the head shows the
  root but no version), None for anything else (not XML, another root, unsafe XML)."""
  import io

  import defusedxml.ElementTree as DET
  version = None
  try:
    for event, element in DET.iterparse(io.BytesIO(data), events=("start", "end"),
                                        forbid_dtd=True):
      if event == "start":
        if version is None:
          if element.tag != "annotations":
            return None
          version = ""
        continue
      if element.tag == "version":
        return (element.text or "").strip()
      if element.tag in ("meta", "image", "track"):
        return version
  except Exception:  # the head ends inside the document, or it is not XML
    pass
  return version


def declared_encoding(head: bytes) -> Tuple[str, bool]:
  """(the XML declaration's encoding, whether the file can be cut into byte ranges)."""
  if head.startswith((b"\xff\xfe", b"\xfe\xff")):
    return "utf-16", False
  found = _ENCODING.match(head.lstrip(b"\xef\xbb\xbf"))
  encoding = found.group(1).decode("ascii") if found else "utf-8"
  return encoding, bool(_ASCII_COMPATIBLE.fullmatch(encoding.lower()))


def range_bytes(f, start: int, end: int, close: bytes = b"</annotations>",
                chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
  """The bytes a range [start, end) of an open file parses: from its first `<image` tag at or
  after `start` (the file's first byte for the range at 0) up to the first `<image` tag at
  or after `end`, then `close`; or to the end of the file. Nothing when no image tag starts
  in the range (a later range reads it)."""
  f.seek(start)
  held, at = b"", start          # bytes not yet given out, and the offset of their first
  copying = start == 0
  while True:
    data = f.read(chunk)
    buf = held + data
    searched = 0
    while True:
      found = _IMAGE_TAG.search(buf, searched)
      if found is None:
        break
      offset = at + found.start()
      if offset >= end:
        if copying:
          yield buf[:found.start()]
          yield close
        return
      if not copying:  # the range's first image: give out from here
        copying = True
        buf, at = buf[found.start():], offset
        searched = 1
        continue
      searched = found.start() + 1
    if not data:
      if copying and buf:
        yield buf
      return
    keep = len(buf) - min(len(buf), _HELD)
    if copying:
      yield buf[:keep]
    held, at = buf[keep:], at + keep


class _Window:
  """A file for iterparse made of `pieces` after `prefix`; refuses to read on when more than
  MAX_ELEMENT_BYTES were read since the last mark() (one image, or one label of the meta)."""

  def __init__(self, pieces: Iterator[bytes], prefix: bytes = b""):
    self._pieces, self._prefix = pieces, prefix
    self.read_bytes = self._marked = 0

  def mark(self) -> None:
    self._marked = self.read_bytes

  def read(self, size: int = -1) -> bytes:
    if self.read_bytes - self._marked > MAX_ELEMENT_BYTES:
      raise InputError("parse", "too_large",
                       f"one element holds more than {MAX_ELEMENT_BYTES} bytes of XML, the "
                       "most this tool reads for one image")
    if self._prefix:
      data, self._prefix = self._prefix, b""
    else:
      data = next((piece for piece in self._pieces if piece), b"")
    self.read_bytes += len(data)
    return data


def _fragment_head(encoding: str) -> bytes:
  return f'<?xml version="1.0" encoding="{encoding}"?><annotations>'.encode("ascii")


def parse_range(f, start: int, end: int, meta: Optional[Meta] = None,
                include_masks: bool = False, source: str = "") -> Iterator[tuple]:
  """The items of the range [start, end) of an open CVAT XML: ('meta', Meta) when the range
  starts the file, ('image', ParsedImage) for each image whose tag starts in it,
  ('error', InputError, level) for a <track> (object) and for what stops the reading (file:
  the rest of the range is not read). A range after the first needs the file's `meta`."""
  import xml.etree.ElementTree as ET

  import defusedxml.ElementTree as DET
  from defusedxml import DefusedXmlException
  first = start == 0
  pieces = range_bytes(f, start, end)
  if first:
    window = _Window(pieces)
  else:
    opening = next(pieces, None)
    if opening is None:
      return  # no image starts in this range
    window = _Window(_chain(opening, pieces), _fragment_head(meta.encoding))
  tags: List[str] = []      # the open elements
  root = None
  labels: set = set()
  kind = subset = None
  images = 0
  try:
    for event, element in DET.iterparse(window, events=("start", "end"), forbid_dtd=True):
      if event == "start":
        tags.append(element.tag)
        if len(tags) > MAX_XML_DEPTH:
          raise InputError("parse", "too_deep",
                           f"the XML nests deeper than {MAX_XML_DEPTH} elements")
        if len(tags) == 1:
          root = element
          if element.tag != "annotations":
            raise InputError("parse", "malformed_xml", f"the root element is "
                             f"<{element.tag}>, not <annotations>: not a CVAT XML file")
        elif len(tags) == 3 and tags[1] == "meta" and kind is None:
          kind = element.tag  # task, job or project (<dumped> follows it)
        continue
      depth, tag = len(tags), element.tag
      tags.pop()
      if depth == 2:
        if tag == "version" and (element.text or "").strip() != VERSION:
          raise InputError("parse", "unsupported_version", f"<version> is "
                           f"{(element.text or '').strip()!r}; this reader reads {VERSION}")
        if tag == "meta":
          meta = Meta(kind or "task", frozenset(labels), subset, meta.encoding if meta else
                      "utf-8", meta.splittable if meta else True)
          yield ("meta", meta)
        elif tag == "image":
          if meta is None:
            raise InputError("parse", "missing_field", "no <meta> before the first <image>: "
                             "the labels are unknown")
          images += 1
          yield ("image", parse_image(element, meta.labels, include_masks, source))
        elif tag == "track":
          yield ("error", InputError(
              "parse", "unsupported_track",
              f"<track> {element.get('label')!r} (id {element.get('id')}) is a CVAT for "
              "video track, not converted: export the task as 'CVAT for images 1.1'"), "object")
        element.clear()
        root.clear()
        window.mark()
      elif depth > 2 and tags[1] == "meta":
        parent = tags[-1]
        if tag == "label" and parent == "labels":
          name = element.findtext("name")
          if name:
            labels.add(name)
          if len(labels) > MAX_LABELS:
            raise InputError("parse", "too_large", f"<meta> lists more than {MAX_LABELS} labels")
          element.clear()
          window.mark()
        elif tag == "subset" and depth == 4 and kind in ("task", "job"):
          subset = element.text
        elif tag in ("task", "segment", "owner", "assignee") and depth > 3:
          element.clear()  # a project's tasks: nothing of them is needed
          window.mark()
  except InputError as e:
    yield ("error", _stopped(e, images, start), "file")
  except DefusedXmlException as e:
    yield ("error", InputError("parse", "unsafe_xml", f"{type(e).__name__}: {e}"), "file")
  except (ET.ParseError, LookupError, ValueError) as e:  # LookupError: unknown encoding
    yield ("error", _stopped(InputError("parse", "malformed_xml", f"{type(e).__name__}: {e}"),
                             images, start), "file")


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
  yield first
  yield from rest


def _stopped(error: InputError, images: int, start: int) -> InputError:
  where = "the file" if start == 0 else f"the range from byte {start}"
  error.message = (f"{error.message}; {images} image(s) of {where} were read before it, the "
                   "rest is not")
  return error


def read_meta(f, source: str = "") -> Meta:
  """The Meta of an open CVAT XML file (InputError when it cannot be read): the file is read
  up to its first image."""
  head = f.read(HEAD_BYTES)
  encoding, splittable = declared_encoding(head)
  for item in parse_range(f, 0, 1, source=source):
    if item[0] == "error":
      raise item[1]
    if item[0] == "meta":
      return dataclasses.replace(item[1], encoding=encoding, splittable=splittable)
  raise InputError("parse", "missing_field", "the file has no <meta> (the labels)")


def ranges(size: int, splittable: bool, step: Optional[int] = None) -> List[Tuple[int, int]]:
  """[start, end) byte ranges of `step` (RANGE_BYTES) covering a file of `size` bytes; one
  when it is small or cannot be cut."""
  step = step or RANGE_BYTES
  if not splittable or size <= step:
    return [(0, max(size, 1))]
  return [(s, min(s + step, size)) for s in range(0, size, step)]


# ---------------------------------------------------------------------------------------------
# Files, detection and the transform


def annotation_file(uri: str) -> str:
  """An --input as the XML it names: a folder (an unpacked export) means its annotations.xml."""
  if not uri.lower().endswith(".xml") and is_dir(uri):
    return paths.join(uri, EXPORT_FILE)
  return uri


def default_image_root(xml_uri: str) -> str:
  """Where an export keeps its images: images/ beside the XML, else the XML's folder."""
  folder = (posixpath.dirname(xml_uri) if paths.is_remote(xml_uri) else
            os.path.dirname(xml_uri) or ".")
  images = paths.join(folder, "images")
  return images if is_dir(images) else folder


def _head(uri: str) -> bytes:
  with open_read(uri) as f:
    return f.read(HEAD_BYTES)


def is_cvat_xml(uri: str) -> bool:
  """Whether a file's head is a CVAT XML (<annotations> with <version>1.1)."""
  try:
    return head_version(_head(uri)) == VERSION
  except Exception:
    return False


def detect(path: str) -> Optional[str]:
  """--format auto: a .xml whose root is <annotations> with <version>1.1, or a folder holding
  such an annotations.xml (an unpacked CVAT export)."""
  if path.lower().endswith(".xml"):
    return f"CVAT XML {VERSION}" if is_cvat_xml(path) else None
  files = list_dir(path)[1]
  if EXPORT_FILE in files and is_cvat_xml(paths.join(path, EXPORT_FILE)):
    return EXPORT_FILE
  return None


class _PlanFile(beam.DoFn):
  """(split, xml uri, image root) -> (split, uri, root, start, end, Meta) per byte range,
  after reading the file's <meta>; a file whose meta cannot be read is one file error."""

  def process(self, task):
    split, uri, root = task
    try:
      with open_read(uri) as f:
        meta = read_meta(f, uri)
      size = paths.file_size(uri)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except Exception as e:  # unreadable: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="read", reason="unreadable", key=uri, level="file",
          message=f"{type(e).__name__}: {e}"))
      return
    for start, end in ranges(size, meta.splittable):
      yield split, uri, root, start, end, meta


class _ReadRange(beam.DoFn):
  """(split, uri, image root, start, end, Meta) -> an ImageAnnotation per image of the range,
  and ErrorRecords (per element, per image, and what stopped the range)."""

  def __init__(self, allow_absolute: bool, follow_symlinks: bool, include_masks: bool):
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def _locate(self, root: str, name: Optional[str], subset: Optional[str]) -> Tuple[str, str]:
    if subset and name:  # a project export: images/<subset>/<name>
      nested = paths.resolve(root, f"{subset}/{name}", self.allow_absolute,
                             self.follow_symlinks)
      if exists(nested[1]):
        return nested
    return paths.resolve(root, name, self.allow_absolute, self.follow_symlinks)

  def process(self, task):
    split, uri, root, start, end, meta = task
    try:
      with open_read(uri) as f:
        for item in parse_range(f, start, end, meta, self.include_masks, uri):
          if item[0] == "image":
            yield from self._image(item[1], split, uri, root, meta)
          elif item[0] == "error":
            yield beam.pvalue.TaggedOutput("errors", item[1].record(uri, uri, level=item[2]))
    except Exception as e:  # unforeseen: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=uri, level="file",
          message=f"{type(e).__name__}: {e} (the range from byte {start})"))

  def _image(self, image: ParsedImage, split: Optional[str], uri: str, root: str, meta: Meta):
    try:
      key, image_uri = self._locate(root, image.name, image.subset)
      split = split or split_of(image.subset if image.subset is not None else meta.subset)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, image.name or uri))
      return
    for error, level in image.problems:
      yield beam.pvalue.TaggedOutput("errors", error.record(uri, key, level=level))
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=image.objects, split=split, width=image.width,
                          height=image.height)


class ReadCvat(beam.PTransform):
  """CVAT for images 1.1 XML files -> SourceOutput.

  In: (split or None, annotations.xml uri, image root) per file. Out: one ImageAnnotation per
  <image> (boxes in pixels, occluded as truncated; with include_masks each object's polygons
  as its segmentation) and ErrorRecords. A worker reads each file's <meta> and cuts it into
  byte ranges (_PlanFile); the ranges are spread and read by any worker (_ReadRange). Largest
  element: one image's annotation (or a range task, holding the file's label names).
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def expand(self, root):
    planned = (root
               | "Files" >> beam.Create(self.inputs)
               | "PlanRanges" >> beam.ParDo(_PlanFile()).with_outputs("errors", main="ranges"))
    read = (planned.ranges
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRanges" >> beam.ParDo(_ReadRange(
                self.allow_absolute, self.follow_symlinks, self.include_masks))
            .with_outputs("errors", main="images"))
    errors = (planned.errors, read.errors) | "CvatErrors" >> beam.Flatten()
    return SourceOutput(images=read.images, errors=errors)


# --- the source protocol (sources/registry.py) ---

MASKS = True  # polygons: --include-masks rasterizes them


def _inputs(config) -> List[Tuple[Optional[str], str, str]]:
  """(split, annotations.xml, image root) of each --input (root: its --images, else the
  export's images/ folder, else the XML's folder)."""
  result = []
  for split, uri, images in config.input_image_roots():
    xml = annotation_file(uri)
    result.append((split, xml, images or default_image_root(xml)))
  return result


def check(config) -> None:
  """Each input is (or is a folder holding) a CVAT XML: its head's root is <annotations>
  with <version>1.1 (at most HEAD_BYTES read)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.checks import check_file
  for item in config.inputs:
    _, given = paths.parse_assignment(item)
    uri = annotation_file(given)
    check_file(uri, "--input")
    version = head_version(_head(uri))
    if version is None:
      raise UsageError(f"--input {uri} is not a CVAT XML file (no <annotations> root element)")
    if version != VERSION:
      raise UsageError(f"--input {uri} is CVAT XML version {version or '(none)'}; --format "
                       f"cvat reads {VERSION} ('CVAT for images 1.1' exports)")


def possible_splits(config) -> Optional[set]:
  assigned = [paths.parse_assignment(item)[0] for item in config.inputs]
  if all(assigned):
    return set(assigned)
  return None  # subsets are read on workers


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = _inputs(config)
  source = root | "ReadCvat" >> ReadCvat(inputs, config.allow_absolute_paths,
                                         config.follow_symlinks, config.include_masks)
  return source, sorted({split for split, _, _ in inputs if split})


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotations.xml; the image roots when --images does not name them."""
  inputs = _inputs(config)
  implied = [] if config.images else sorted({r for _, _, r in inputs})
  return [("file", xml) for _, xml, _ in inputs], implied


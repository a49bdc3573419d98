"""Streaming one CVAT XML, or one byte range of it: the `<version>`, the `<meta>` (the export's
kind, its labels, the task's or job's subset) and each `<image>`.

The file is streamed (defusedxml's iterparse, DTDs and entities refused), each `<image>`
cleared once read: memory is one image (at most byte_ranges.MAX_ELEMENT_BYTES of XML, and of
its child elements at most MAX_OBJECTS_PER_IMAGE kept) + one 64 kB chunk. An image over one of
these budgets, or nested deeper than MAX_XML_DEPTH, is rejected alone: the parser stops there
and starts again at the next `<image` tag, as a range after the first (not in a file that
cannot be cut, UTF-16: there it stops the file). Pure and Beam-free.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Dict, FrozenSet, Generator, Iterator, List, Optional, Tuple

from beam_tfrecord.records.keypoints import KeypointLayout, layout_of
from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.sources.cvat.byte_ranges import (Window, chain,
                                                    declared_encoding,
                                                    fragment_head, range_bytes)
from beam_tfrecord.sources.cvat.shapes import parse_image
from beam_tfrecord.sources.depth import too_deep

VERSION = "1.1"

# The launcher reads HEAD_BYTES of a file (check, detect). CVAT nests 8 deep
# (annotations/meta/project/labels/label/attributes/attribute/name).
HEAD_BYTES = 64 << 10
MAX_XML_DEPTH = 32
MAX_LABELS = 1 << 16


@dataclasses.dataclass(frozen=True)
class Meta:
  """What the <meta> of one file says: the export's kind (task, job, project), its label
  names (a skeleton's point labels, which have a <parent>, are not among them), the task's or
  job's subset, how a range of the file is parsed on its own, and its skeleton labels as
  (label, point names, edges as 0-based index pairs)."""
  kind: str
  labels: FrozenSet[str]
  subset: Optional[str] = None
  encoding: str = "utf-8"
  splittable: bool = True
  skeletons: Tuple[Tuple[str, Tuple[str, ...], Tuple[Tuple[int, int], ...]], ...] = ()

  @functools.cached_property
  def layout(self) -> Optional[KeypointLayout]:
    """The file's keypoint layout (its skeleton labels in <meta> order), None without."""
    return layout_of(self.skeletons)


def head_version(data: bytes) -> Optional[str]:
  """The <version> of a file head whose root is <annotations> ('' when the head shows the
  root but no version), None for anything else (not XML, another root); InputError
  'unsafe_xml' for a DTD or entities."""
  import io

  import defusedxml.ElementTree as DET
  from defusedxml import DefusedXmlException
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
  except DefusedXmlException as e:
    raise unsafe_xml(e) from None
  except Exception:  # the head ends inside the document, or it is not XML
    pass
  return version


def unsafe_xml(e: Exception) -> InputError:
  """What defusedxml refused (a DTD, entities), said as VOC's records say it."""
  return InputError("parse", "unsafe_xml", f"the XML declares a DTD or entities "
                    f"({type(e).__name__}): DTDs and entities are refused (unsafe XML)")


def parse_range(f, start: int, end: int, meta: Optional[Meta] = None,
                include_masks: bool = False, source: str = "") -> Iterator[tuple]:
  """The items of the range [start, end) of an open CVAT XML: ('meta', Meta) when the range
  starts the file, ('image', ParsedImage) for each image whose tag starts in it, and
  ('error', InputError, level, key or None) for a <track> (object), for an image that is
  rejected whole (image, its name: over MAX_ELEMENT_BYTES, nested too deep, more than
  MAX_OBJECTS_PER_IMAGE elements, a bad width or height; the images after it are read), and
  for what stops the reading (file: the rest of the range is not read). A range after the
  first needs the file's `meta`."""
  reader = _RangeReader(f, start, end, meta, include_masks, source)
  at: Optional[int] = start
  while at is not None:
    at = yield from reader.part(at)


class _RangeReader:
  """One range parsed in parts: a part ends at the range's end or at an image too large or
  too deep to read, and the next part starts after that image (a fragment, as a range after
  the first)."""

  def __init__(self, f, start: int, end: int, meta: Optional[Meta], include_masks: bool,
               source: str):
    self.f, self.start, self.end, self.meta = f, start, end, meta
    self.include_masks, self.source = include_masks, source
    self.images = 0  # read so far, for the message of what stops the reading

  def part(self, at: int) -> Generator[tuple, None, Optional[int]]:
    """The items from offset `at` (the range's start, or where the last part stopped); returns
    where the next part starts (None: the range is done)."""
    import xml.etree.ElementTree as ET

    import defusedxml.ElementTree as DET
    from defusedxml import DefusedXmlException
    pieces = range_bytes(self.f, at, self.end)
    if at == 0:
      window = Window(pieces)
    else:
      opening = next(pieces, None)
      if opening is None:
        return None  # no image starts in this range
      window = Window(chain(opening, pieces), fragment_head(self.meta.encoding))
    tags: List[str] = []      # the open elements
    root = image = None       # the root, the open <image>
    elements = 0              # the open image's child elements so far
    labels: set = set()
    skeletons = _Skeletons()
    kind = subset = None
    try:
      for event, element in DET.iterparse(window, events=("start", "end"), forbid_dtd=True):
        if event == "start":
          tags.append(element.tag)
          if len(tags) > MAX_XML_DEPTH:
            raise too_deep(MAX_XML_DEPTH, "XML", "elements")
          if len(tags) == 1:
            root = element
            if element.tag != "annotations":
              raise InputError("parse", "malformed_xml", f"the root element is "
                               f"<{element.tag}>, not <annotations>: not a CVAT XML file")
          elif len(tags) == 2 and element.tag == "image":
            image, elements = element, 0
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
            self.meta = Meta(kind or "task", frozenset(labels), subset,
                             self.meta.encoding if self.meta else "utf-8",
                             self.meta.splittable if self.meta else True,
                             skeletons.finished())
            yield ("meta", self.meta)
          elif tag == "image":
            if self.meta is None:
              raise InputError("parse", "missing_field", "no <meta> before the first <image>: "
                               "the labels are unknown")
            self.images += 1
            yield self._image(element, elements)
            image = None
          elif tag == "track":
            yield ("error", InputError(
                "parse", "unsupported_track",
                f"<track> {element.get('label')!r} (id {element.get('id')}) is a CVAT for "
                "video track, not converted: export the task as 'CVAT for images 1.1'"),
                "object", None)
          element.clear()
          root.clear()
          window.mark()
        elif depth == 3 and image is not None:
          elements += 1
          if elements > MAX_OBJECTS_PER_IMAGE:
            del image[-1]  # the image is rejected: nothing past the bound is kept
        elif depth > 2 and tags[1] == "meta":
          parent = tags[-1]
          if tag == "label" and parent == "labels":
            name = element.findtext("name")
            if name and not skeletons.add(name, element):  # a skeleton's point: no class
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
      # one image too large or too deep: that image is rejected, the next part starts after it
      # (the last piece fed ends before the next image's tag: byte_ranges.range_bytes)
      budget = e.reason == "too_large" or e.reason == "too_deep"
      if (budget and image is not None and self.meta is not None and self.meta.splittable
          and window.position is not None and window.position > at):
        name = image.get("name")
        e.message = f"image {name!r}: {e.message}; the image is not converted"
        yield ("error", e, "image", name)
        return window.position
      yield ("error", _stopped(e, self.images, self.start), "file", None)
    except DefusedXmlException as e:
      yield ("error", unsafe_xml(e), "file", None)
    except (ET.ParseError, LookupError, ValueError) as e:  # LookupError: unknown encoding
      yield ("error", _stopped(InputError("parse", "malformed_xml", f"{type(e).__name__}: {e}"),
                               self.images, self.start), "file", None)
    return None

  def _image(self, element, elements: int) -> tuple:
    """The item of one <image> that ended: ('image', ParsedImage), or its rejection."""
    name = element.get("name")
    if elements > MAX_OBJECTS_PER_IMAGE:
      return ("error", InputError(
          "parse", "too_many_objects", f"image {name!r} has {elements:,} elements, more than "
          f"the {MAX_OBJECTS_PER_IMAGE:,} one image may have: the image is not converted"),
          "image", name)
    try:
      return ("image", parse_image(element, self.meta.labels, self.include_masks, self.source,
                                   self.meta.layout))
    except InputError as e:  # its width or height: that image only
      return ("error", e, "image", name)


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


class _Skeletons:
  """The skeleton labels of a <meta>: each `<label>` of `<type>skeleton</type>` with its
  `<svg>` (CVAT's skeleton drawing: a `<circle data-node-id data-label-name>` per point, a
  `<line data-node-from data-node-to>` per edge), and the point labels, whose `<parent>`
  names their skeleton (CVAT's bindings.py writes both; its importer reads the points' order
  and the edges from the svg)."""

  def __init__(self):
    self.drawings: Dict[str, str] = {}
    self.points: Dict[str, List[str]] = {}

  def add(self, name: str, label) -> bool:
    """Note one <label>; True when it is a skeleton's point (not a class of its own)."""
    parent = (label.findtext("parent") or "").strip()
    if parent:
      self.points.setdefault(parent, []).append(name)
      return True
    if (label.findtext("type") or "").strip() == "skeleton":
      self.drawings[name] = label.findtext("svg") or ""
    return False

  def finished(self) -> Tuple:
    return tuple((name, *_drawn(svg, tuple(self.points.get(name, ()))))
                 for name, svg in self.drawings.items())


def _drawn(svg: str, points: Tuple[str, ...]) -> Tuple[Tuple[str, ...], Tuple]:
  """(point names in the drawing's order, edges as 0-based pairs) of a skeleton's svg; the
  <parent> labels in <meta> order when the svg names no points. InputError (the file's meta)
  for an svg that is not XML."""
  import xml.etree.ElementTree as ET

  import defusedxml.ElementTree as DET
  try:
    root = DET.fromstring(f"<svg>{svg}</svg>", forbid_dtd=True)
  except ET.ParseError as e:
    raise InputError("parse", "malformed_xml", f"a skeleton's <svg> is not XML: {e}") from None
  circles = [c for c in root.iter() if c.tag.rsplit("}", 1)[-1] == "circle"]
  names = tuple(c.get("data-label-name") or "" for c in circles)
  if not circles or not all(names):
    names = points
  nodes = {c.get("data-node-id", str(i + 1)): i for i, c in enumerate(circles)}
  edges = tuple((nodes[line.get("data-node-from")], nodes[line.get("data-node-to")])
                for line in root.iter() if line.tag.rsplit("}", 1)[-1] == "line"
                and line.get("data-node-from") in nodes and line.get("data-node-to") in nodes)
  return names, edges if len(names) == len(circles) else ()

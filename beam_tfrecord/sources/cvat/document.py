"""Streaming one CVAT XML, or one byte range of it: the `<version>`, the `<meta>` (the export's
kind, its labels, the task's or job's subset) and each `<image>`.

The file is streamed (defusedxml's iterparse, DTDs refused), each `<image>` cleared once read:
memory is one image (at most byte_ranges.MAX_ELEMENT_BYTES of XML) + one 64 kB chunk. Pure and
Beam-free.
"""
from __future__ import annotations

import dataclasses
from typing import FrozenSet, Iterator, List, Optional

from beam_tfrecord.records.model import InputError
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
  names, the task's or job's subset, and how a range of the file is parsed on its own."""
  kind: str
  labels: FrozenSet[str]
  subset: Optional[str] = None
  encoding: str = "utf-8"
  splittable: bool = True


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
    window = Window(pieces)
  else:
    opening = next(pieces, None)
    if opening is None:
      return  # no image starts in this range
    window = Window(chain(opening, pieces), fragment_head(meta.encoding))
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
          raise too_deep(MAX_XML_DEPTH, "XML", "elements")
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

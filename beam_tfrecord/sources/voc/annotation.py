"""One Pascal VOC annotation XML: its <filename>, <size> and <object>s.

Fields are found by tag name, never by position; coordinates may be floats; difficult,
truncated and pose are optional. <folder> and <path> are ignored (they name the annotator's
machine). XML is parsed with defusedxml, so entity bombs and external entities are refused.
Beam-free.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from beam_tfrecord.records.model import Box, InputError, ObjectAnnotation
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.sources.depth import too_deep
from beam_tfrecord.storage.files import open_read


def _text(node, tag: str) -> Optional[str]:
  child = node.find(tag)
  if child is None or child.text is None:
    return None
  return child.text.strip()


def _float(node, tag: str, what: str) -> float:
  value = _text(node, tag)
  if value is None:
    raise InputError("parse", "missing_field", f"{what} has no <{tag}>")
  try:
    return float(value)
  except ValueError:
    raise InputError("parse", "wrong_type", f"{what} <{tag}> is {value!r}, not a number") from None


def _flag(node, tag: str, what: str) -> Optional[bool]:
  value = _text(node, tag)
  if value is None or value == "":
    return None
  try:
    return bool(int(float(value)))
  except (ValueError, OverflowError):
    raise InputError("parse", "wrong_type", f"{what} <{tag}> is {value!r}, not 0/1") from None


# Budgets of one annotation XML. ElementTree holds 25-45 bytes per byte of XML (1M nested
# <a>, 6.8 MB: 290 MB), so the size caps memory (~180 MB at 4 MB); a VOC file of 4 MB would
# describe ~13,000 objects. VOC nests 3 deep (annotation/object/bndbox).
MAX_XML_BYTES = 4 << 20
MAX_XML_DEPTH = 32


def _too_large_xml(size: str) -> InputError:
  return InputError("parse", "too_large", f"the XML file has {size} bytes, over the "
                    f"{MAX_XML_BYTES} an annotation file may have")


def read_xml(readable) -> bytes:
  """An XML file's bytes (a Beam ReadableFile or a path), at most MAX_XML_BYTES + 1 read."""
  if not hasattr(readable, "open"):
    with open_read(readable) as f:
      data = f.read(MAX_XML_BYTES + 1)
  else:
    with readable.open() as f:
      data = f.read(MAX_XML_BYTES + 1)
  if len(data) > MAX_XML_BYTES:
    raise _too_large_xml(f"more than {MAX_XML_BYTES}")
  return data


def _deeper_than(root, limit: int) -> bool:
  stack = [(root, 1)]
  while stack:
    node, depth = stack.pop()
    if depth > limit:
      return True
    stack.extend((child, depth + 1) for child in node)
  return False


def parse_xml(data: bytes) -> Tuple[str, Optional[int], Optional[int], List[ObjectAnnotation]]:
  """(filename, width, height, objects) of one VOC annotation document, of at most
  MAX_XML_BYTES nesting at most MAX_XML_DEPTH elements (InputError 'too_large', 'too_deep')
  with at most MAX_OBJECTS_PER_IMAGE <object>s ('too_many_objects')."""
  import defusedxml.ElementTree as ET
  from defusedxml import DefusedXmlException
  if len(data) > MAX_XML_BYTES:
    raise _too_large_xml(str(len(data)))
  try:
    root = ET.fromstring(data)
  except DefusedXmlException as e:
    raise InputError("parse", "unsafe_xml", f"{type(e).__name__}: {e}") from None
  except (ET.ParseError, LookupError, ValueError) as e:  # LookupError: unknown encoding
    raise InputError("parse", "malformed_xml", f"{type(e).__name__}: {e}") from None
  if root.tag != "annotation":
    raise InputError("parse", "malformed_xml", f"root element is <{root.tag}>, not <annotation>")
  if _deeper_than(root, MAX_XML_DEPTH):
    raise too_deep(MAX_XML_DEPTH, "XML", "elements")
  filename = _text(root, "filename")
  if not filename:
    raise InputError("parse", "missing_field", "annotation has no <filename>")
  width = height = None
  size = root.find("size")
  if size is not None:
    w, h = _text(size, "width"), _text(size, "height")
    try:
      width = int(float(w)) if w else None
      height = int(float(h)) if h else None
    except (ValueError, OverflowError):
      raise InputError("parse", "wrong_type", f"<size> is {w!r}x{h!r}") from None
  found = root.findall("object")
  if len(found) > MAX_OBJECTS_PER_IMAGE:  # none is built
    raise InputError("parse", "too_many_objects",
                     f"{filename} has {len(found):,} <object>s, more than the "
                     f"{MAX_OBJECTS_PER_IMAGE:,} one image may have: the image is not converted")
  objects = []
  for i, obj in enumerate(found):
    what = f"object {i}"
    name = _text(obj, "name")
    if not name:
      raise InputError("parse", "missing_field", f"{what} has no <name>")
    bndbox = obj.find("bndbox")
    if bndbox is None:
      raise InputError("parse", "missing_field", f"{what} ({name!r}) has no <bndbox>")
    box = Box(*(_float(bndbox, tag, what) for tag in ("xmin", "ymin", "xmax", "ymax")))
    objects.append(ObjectAnnotation(
        label=name, box=box, difficult=_flag(obj, "difficult", what),
        truncated=_flag(obj, "truncated", what), pose=_text(obj, "pose") or None))
  return filename, width, height, objects

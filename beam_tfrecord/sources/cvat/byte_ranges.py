"""A large annotations.xml cut into byte ranges that any worker parses on its own.

A range is the images whose `<image` tag starts in it, each read to its end; a range after the
first is parsed as a fragment behind a made-up `<annotations>` head. The cut is by XML element,
not by line (storage's line readers do not fit). An `<image` inside a comment or CDATA would be
taken for a tag (CVAT writes neither); a file in an encoding that is not ASCII-compatible
(UTF-16) is one range. Pure and Beam-free.
"""
from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

from beam_tfrecord.records.model import InputError

# One <image> (or the meta between two of its labels or tasks) may hold MAX_ELEMENT_BYTES of
# XML: ElementTree holds up to ~45 bytes per byte of tiny elements (voc MAX_XML_BYTES),
# ~180 MB at 4 MB, which is ~40,000 boxes.
MAX_ELEMENT_BYTES = 4 << 20
RANGE_BYTES = 64 << 20   # a bigger file is read in ranges of this size by any worker
CHUNK_BYTES = 64 << 10   # what the parser is fed at once

_IMAGE_TAG = re.compile(rb"<image[\s/>]")
_HELD = len(b"<image")  # bytes held back from a chunk: a tag may start there
_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
# encodings in which '<image' is these bytes wherever it appears (a file can be cut anywhere)
_ASCII_COMPATIBLE = re.compile(r"(utf-?8|(us-)?ascii|iso-?8859-\d+|latin-?1|(windows|cp)-?125\d)")


def declared_encoding(head: bytes) -> Tuple[str, bool]:
  """(the XML declaration's encoding, whether the file can be cut into byte ranges)."""
  if head.startswith((b"\xff\xfe", b"\xfe\xff")):
    return "utf-16", False
  found = _ENCODING.match(head.lstrip(b"\xef\xbb\xbf"))
  encoding = found.group(1).decode("ascii") if found else "utf-8"
  return encoding, bool(_ASCII_COMPATIBLE.fullmatch(encoding.lower()))


def ranges(size: int, splittable: bool, step: Optional[int] = None) -> List[Tuple[int, int]]:
  """[start, end) byte ranges of `step` (RANGE_BYTES) covering a file of `size` bytes; one
  when it is small or cannot be cut."""
  step = step or RANGE_BYTES
  if not splittable or size <= step:
    return [(0, max(size, 1))]
  return [(s, min(s + step, size)) for s in range(0, size, step)]


def range_bytes(f, start: int, end: int, close: bytes = b"</annotations>",
                chunk: int = CHUNK_BYTES) -> Iterator[Tuple[bytes, int]]:
  """(bytes, the file offset just past them) of what a range [start, end) of an open file
  parses: from its first `<image` tag at or after `start` (the file's first byte for the
  range at 0) up to the first `<image` tag at or after `end`, then `close` (at that tag's
  offset); or to the end of the file. Nothing when no image tag starts in the range.
  A piece ends at a chunk's end or before an `<image` tag, never past one: a parser fed piece
  by piece has seen no byte of an image after the one it is in (parse_range resumes at the
  last piece's offset after rejecting that image)."""
  f.seek(start)
  held, at = b"", start          # bytes not yet given out, and the offset of their first
  copying = start == 0
  while True:
    data = f.read(chunk)
    buf = held + data
    pos = 0                      # buf[:pos] is given out, or skipped before the first tag
    for found in _IMAGE_TAG.finditer(buf):
      offset = at + found.start()
      if offset >= end:
        if copying:
          if found.start() > pos:
            yield buf[pos:found.start()], offset
          yield close, offset
        return
      if copying and found.start() > pos:
        yield buf[pos:found.start()], offset
      copying, pos = True, found.start()
    if not data:
      if copying and len(buf) > pos:
        yield buf[pos:], at + len(buf)
      return
    keep = max(len(buf) - _HELD, pos)  # a tag may start in the last bytes
    if copying and keep > pos:
      yield buf[pos:keep], at + keep
    held, at = buf[keep:], at + keep


class Window:
  """A file for iterparse made of (bytes, offset) `pieces` after `prefix`; refuses to read on
  when more than MAX_ELEMENT_BYTES were read since the last mark() (one image, or one label of
  the meta). `position`: the file offset just past the last piece read."""

  def __init__(self, pieces: Iterator[Tuple[bytes, int]], prefix: bytes = b""):
    self._pieces, self._prefix = pieces, prefix
    self.read_bytes = self._marked = 0
    self.position: Optional[int] = None

  def mark(self) -> None:
    self._marked = self.read_bytes

  def read(self, size: int = -1) -> bytes:
    if self.read_bytes - self._marked > MAX_ELEMENT_BYTES:
      raise InputError("parse", "too_large",
                       f"one element holds more than {MAX_ELEMENT_BYTES} bytes of XML, the "
                       "most this tool reads for one image")
    data = b""
    if self._prefix:
      data, self._prefix = self._prefix, b""
    else:
      for data, self.position in self._pieces:
        if data:
          break
    self.read_bytes += len(data)
    return data


def fragment_head(encoding: str) -> bytes:
  """What a range after the first is parsed behind: an XML declaration and the root."""
  return f'<?xml version="1.0" encoding="{encoding}"?><annotations>'.encode("ascii")


def chain(first, rest: Iterator) -> Iterator:
  yield first
  yield from rest

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


class Window:
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


def fragment_head(encoding: str) -> bytes:
  """What a range after the first is parsed behind: an XML declaration and the root."""
  return f'<?xml version="1.0" encoding="{encoding}"?><annotations>'.encode("ascii")


def chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
  yield first
  yield from rest

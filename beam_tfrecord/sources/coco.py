"""COCO instances JSON (images, annotations, categories), parsed on workers with ijson.

A COCO file can be ~450 MB (train2017), so the launcher reads at most its first
LAUNCH_HEAD_BYTES: the pipeline starts from a list of (file, section) tasks, and each worker
streams one section of one file with ijson, emitting small records. Images and their
annotations meet in a CoGroupByKey. On the in-process runner one worker reads each file once
and joins it through partitioned spill files on local disk (_JoinFile), in bounded memory.
"""
from __future__ import annotations

import codecs
import contextlib
import marshal
import math
import operator
import re
import struct
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.storage import paths
from beam_tfrecord.records import masks

SECTIONS = ("images", "annotations", "categories")


def _number(value: Any, field: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise InputError("parse", "wrong_type", f"{field} must be a number, got {value!r}")
  return float(value)


def _int_id(value: Any, field: str) -> int:
  if (isinstance(value, bool) or not isinstance(value, (int, float)) or
      not math.isfinite(value) or value != int(value)):
    raise InputError("parse", "wrong_type", f"{field} must be an integer, got {value!r}")
  return int(value)


def _require(record: Any, field: str, kind: str) -> Any:
  if not isinstance(record, dict):
    raise InputError("parse", "wrong_type", f"{kind} entry must be an object, got {record!r:.80}")
  if field not in record:
    raise InputError("parse", "missing_field", f"{kind} entry has no {field!r}: {record!r:.200}")
  return record[field]


_INT_OR_NONE = (int, type(None))
_NUMBER = (int, float)


def parse_image(record: Any) -> Tuple[int, str, Optional[int], Optional[int]]:
  """(id, file_name, width, height) of one entry of `images`."""
  if type(record) is dict:  # the usual entry, checked by exact types (bool is not int here)
    image_id, file_name = record.get("id"), record.get("file_name")
    width, height = record.get("width"), record.get("height")
    if (type(image_id) is int and type(file_name) is str and type(width) in _INT_OR_NONE and
        type(height) in _INT_OR_NONE):
      return image_id, file_name, width, height
  return _checked_image(record)


def _checked_image(record: Any) -> Tuple[int, str, Optional[int], Optional[int]]:
  image_id = _int_id(_require(record, "id", "image"), "image id")
  file_name = _require(record, "file_name", "image")
  if not isinstance(file_name, str):
    raise InputError("parse", "wrong_type", f"image {image_id} file_name is {file_name!r}")
  width, height = record.get("width"), record.get("height")
  width = _int_id(width, "image width") if width is not None else None
  height = _int_id(height, "image height") if height is not None else None
  return image_id, file_name, width, height


def parse_annotation(record: Any) -> Tuple[int, int, Box, bool, Optional[float]]:
  """(image_id, category_id, box, is_crowd, area) of one entry of `annotations`."""
  image_id, category_id, box, is_crowd, area = annotation_fields(record)
  return image_id, category_id, Box(*box), is_crowd, area


def annotation_fields(record: Any) -> Tuple[int, int, Tuple[float, float, float, float], bool,
                                            Optional[float]]:
  """parse_annotation with the box as (x0, y0, x1, y1). The usual entry is checked by exact
  types (bool is not a number here); anything else goes through the checks that name the
  problem (80,000 annotations: 2.0 s the careful way on every entry, 0.3 s so, under
  cProfile)."""
  if type(record) is dict:
    image_id, category_id = record.get("image_id"), record.get("category_id")
    bbox, iscrowd, area = record.get("bbox"), record.get("iscrowd", 0), record.get("area")
    if (type(image_id) is int and type(category_id) is int and type(bbox) is list and
        len(bbox) == 4 and type(bbox[0]) in _NUMBER and type(bbox[1]) in _NUMBER and
        type(bbox[2]) in _NUMBER and type(bbox[3]) in _NUMBER and
        iscrowd in (0, 1, True, False) and (area is None or type(area) in _NUMBER)):
      x, y, w, h = float(bbox[0]), float(bbox[1]), float(bbox[2]), float(bbox[3])
      return (image_id, category_id, (x, y, x + w, y + h), bool(iscrowd),
              None if area is None else float(area))
  return _checked_annotation(record)


def _checked_annotation(record: Any) -> Tuple[int, int, Tuple[float, float, float, float], bool,
                                             Optional[float]]:
  image_id = _int_id(_require(record, "image_id", "annotation"), "annotation image_id")
  category_id = _int_id(_require(record, "category_id", "annotation"), "annotation category_id")
  bbox = _require(record, "bbox", "annotation")
  if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
    raise InputError("parse", "wrong_type", f"annotation bbox must be [x, y, w, h], got {bbox!r}")
  x, y, w, h = (_number(v, "bbox value") for v in bbox)
  iscrowd = record.get("iscrowd", 0)
  if iscrowd not in (0, 1, True, False):
    raise InputError("parse", "wrong_type", f"iscrowd must be 0 or 1, got {iscrowd!r}")
  area = record.get("area")
  area = _number(area, "area") if area is not None else None
  return image_id, category_id, (x, y, x + w, y + h), bool(iscrowd), area


def annotation_extras(record: Dict[str, Any], include_masks: bool
                      ) -> Tuple[Optional[int], Optional[str]]:
  """(annotation id or None, segmentation as compact JSON or None) of a parsed annotation.
  The segmentation is kept only with --include-masks: it can be large and these records go
  through shuffles. It is checked when rasterized, where the image size is known."""
  ann_id = record.get("id")
  ann_id = ann_id if isinstance(ann_id, int) and not isinstance(ann_id, bool) else None
  segmentation = record.get("segmentation") if include_masks else None
  return ann_id, (masks.to_json(segmentation) if segmentation is not None else None)


def parse_category(record: Any) -> Tuple[int, str]:
  category_id = _int_id(_require(record, "id", "category"), "category id")
  name = _require(record, "name", "category")
  if not isinstance(name, str) or not name:
    raise InputError("parse", "wrong_type", f"category {category_id} name is {name!r}")
  return category_id, name


MAX_DEPTH = 32  # COCO nests 5 deep; pathological nesting costs ijson quadratic memory


def stream_section(fileobj, section: str, max_depth: int = MAX_DEPTH) -> Iterator[Any]:
  """Yield the entries of one top-level array of a COCO JSON without loading the file.

  Built on ijson's flat event stream (not ijson.items, whose prefix bookkeeping grows with the
  square of the nesting depth: 30 kB of '[' took 2.2 GB), with a depth limit. Raises
  InputError when the document is not an object, the section is not an array, or when
  `images`/`categories` are missing (`annotations` may be: COCO test-set files lack it).
  """
  found: set = set()
  for _, entry in stream_sections(fileobj, (section,), max_depth, found):
    yield entry
  error = None if section in found else missing_section(section)
  if error:
    raise error


def stream_sections(fileobj, sections: Sequence[str], max_depth: int = MAX_DEPTH,
                    found: Optional[set] = None,
                    bad: Optional[List[Tuple[str, InputError]]] = None
                    ) -> Iterator[Tuple[str, Any]]:
  """(section, entry) for the entries of several top-level arrays, in one pass over the file
  (as stream_section). With `found`, the sections seen are added to it instead of raising for
  a missing one; with `bad`, a section that is not an array is skipped and its error added
  there, so that the other sections are still read."""
  import ijson
  wanted = set(sections)
  found_sections: set = found if found is not None else set()
  depth = 0             # open containers
  key = None            # last key of the top-level object
  section = None        # the wanted section whose array we are in
  stack: List[Any] = []  # containers of the entry being built
  keys: List[Optional[str]] = []

  def add(value):
    if isinstance(stack[-1], dict):
      stack[-1][keys[-1]] = value
    else:
      stack[-1].append(value)

  for event, value in ijson.basic_parse(fileobj, use_float=True):
    if event in ("start_map", "start_array"):
      depth += 1
      if depth > max_depth:
        raise InputError("parse", "too_deep", f"JSON nests deeper than {max_depth} levels")
      if depth == 1:
        if event != "start_map":
          raise InputError("parse", "wrong_type", "a COCO file must be a JSON object")
        continue
      if depth == 2 and key in wanted:
        found_sections.add(key)
        if event != "start_array":
          error = InputError("parse", "wrong_type", f"`{key}` must be an array")
          if bad is None:
            raise error
          bad.append((key, error))
          continue
        section = key
        continue
      if section is not None:
        stack.append({} if event == "start_map" else [])
        keys.append(None)
      continue
    if event in ("end_map", "end_array"):
      depth -= 1
      if section is not None and depth == 1:
        section = None
      elif section is not None and stack:
        done = stack.pop()
        keys.pop()
        if stack:
          add(done)
        else:
          yield section, done
      continue
    if event == "map_key":
      if depth == 1:
        key = value
      elif section is not None and stack:
        keys[-1] = value
      continue
    if section is not None:  # a scalar
      if stack:
        add(value)
      else:
        yield section, value  # a scalar entry: the parse function reports its wrong type
  for name in sections:
    if found is None and name not in found_sections:
      raise missing_section(name)


# fast_sections reads the file in blocks of this many bytes (one block's text in memory, plus
# the entry that straddles its end)
FAST_BLOCK_BYTES = 4 << 20
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_NEXT = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")  # after an array entry


# numbers ijson refuses and json reads: integers beyond 64 bits, floats that overflow
_SUSPECT_NUMBER = re.compile(
    rb"-?\d{19,}(?:\.\d*)?(?:[eE][+-]?\d+)?|-?\d+(?:\.\d*)?[eE][+-]?\d{3,}")
FAST_ENTRY_CHARS = 64 << 20  # an entry still unparsed past this: not read further here


def _ijson_refuses(data: bytes) -> bool:
  """Whether the bytes may hold a number ijson refuses (|int| >= 2**63, a float beyond
  double range); matches inside strings only send the file the slower way. _big_number's
  search in C first (the regex alone tripled fast_sections' time)."""
  if not _big_number(data):
    return False
  for match in _SUSPECT_NUMBER.finditer(data):
    token = match.group()
    if b"." in token or b"e" in token or b"E" in token:
      if math.isinf(float(token)):
        return True
    elif not -2**63 < int(token) < 2**63:
      return True
  return False


class _NotStreamable(ValueError):
  """fast_sections met what ijson's stream would stop at (a number json reads and ijson
  refuses, or text that is not JSON): the caller goes on as after a streaming error."""


def _refuse_constant(name: str):
  raise _NotStreamable(f"{name} is not JSON")  # ijson refuses NaN and Infinity


def _nesting_over(value: Any, limit: int) -> bool:
  """Whether a parsed JSON value nests more than `limit` containers (itself counted)."""
  todo = [(value, 1)]
  while todo:
    item, depth = todo.pop()
    if depth > limit:
      return True
    children = item.values() if isinstance(item, dict) else item
    for child in children:
      if isinstance(child, (dict, list)):
        todo.append((child, depth + 1))
  return False


def fast_sections(fileobj, sections: Sequence[str], max_depth: int = MAX_DEPTH,
                  found: Optional[set] = None,
                  bad: Optional[List[Tuple[str, InputError]]] = None,
                  block: int = FAST_BLOCK_BYTES) -> Iterator[Tuple[str, Any]]:
  """stream_sections' entries, each parsed by Python's json (C) from a window of the file:
  the top-level object is walked here, every array entry and every other value is one
  raw_decode. 2.5x faster than stream_sections' ijson events through Python (200,000 images
  and 400,000 objects: 1.0 s against 2.5 s of CPU, 12 of the main process's ~65 us per small
  image), in the same memory (one block and one entry).

  What ijson would refuse (NaN, Infinity, integers beyond 64 bits, floats beyond double
  range: checked on each block's bytes before its entries are read) or any text that is not
  JSON (or an entry over FAST_ENTRY_CHARS) raises
  _NotStreamable (a ValueError) before the entry it is in: the caller goes on as after a
  streaming error, from the entries read so far. Nesting deeper than max_depth raises
  InputError too_deep, as stream_sections does."""
  import json
  import json.scanner
  wanted = set(sections)
  found_sections: set = found if found is not None else set()
  # the decoder's C scanner itself: raw_decode is a Python frame around it
  scan = json.scanner.make_scanner(json.JSONDecoder(parse_constant=_refuse_constant))
  text_of = codecs.getincrementaldecoder("utf-8")()
  text, at, ended, tail = "", 0, False, b""

  def read_more() -> None:
    nonlocal text, at, ended, tail
    data = fileobj.read(block)
    seen = tail + data  # with the end of the blocks before: a number may straddle them
    if _ijson_refuses(seen):
      raise _NotStreamable("a number ijson would refuse")
    tail = seen[-32:]
    ended = not data
    text = text[at:] + text_of.decode(data, final=ended)
    at = 0

  def next_char() -> str:
    """The next character that is not white space (not consumed); '' at the end."""
    nonlocal at
    while True:
      at = _JSON_SPACE.match(text, at).end()
      if at < len(text) or ended:
        return text[at] if at < len(text) else ""
      read_more()

  def expect(char: str) -> None:
    nonlocal at
    if next_char() != char:
      raise _NotStreamable(f"expected {char!r} at a top-level position")
    at += 1

  def value(depth: int) -> Any:
    """The JSON value at the current position, whole."""
    nonlocal at
    if at >= len(text) or text[at] in " \t\n\r":
      next_char()
    while True:
      try:
        result, end = scan(text, at)
        # a number ending near the window's end may go on in the next block ("1." then
        # "5"); strings, literals and containers end where their text does
        if ended or type(result) not in (int, float) or end + 64 <= len(text):
          break
      except RecursionError:
        raise InputError("parse", "too_deep",
                         f"JSON nests deeper than {max_depth} levels") from None
      except _NotStreamable:
        raise
      except (StopIteration, ValueError):
        if ended or len(text) - at > FAST_ENTRY_CHARS:
          raise _NotStreamable("not JSON") from None
      read_more()
    start, at = at, end
    # nesting is at most the brackets the text opens (two counts in C); only an entry with
    # more is walked
    if (isinstance(result, (dict, list)) and
        text.count("[", start, end) + text.count("{", start, end) > max_depth - depth and
        _nesting_over(result, max_depth - depth)):
      raise InputError("parse", "too_deep", f"JSON nests deeper than {max_depth} levels")
    return result

  if next_char() != "{":
    if next_char() == "[":
      raise InputError("parse", "wrong_type", "a COCO file must be a JSON object")
    if not next_char():
      raise _NotStreamable("an empty file")
    value(0)  # a lone scalar: no section, as ijson's stream gives none
    if next_char():
      raise _NotStreamable("data after the top-level value")
    return
  at += 1
  first = True
  while True:
    char = next_char()
    if char == "}":
      break
    if not first:
      expect(",")
    first = False
    if next_char() != '"':
      raise _NotStreamable("expected a key")
    key = value(1)
    expect(":")
    if key not in wanted:
      value(1)
      continue
    if next_char() not in "[{":  # a scalar: ijson's stream sees no section there
      value(1)
      continue
    found_sections.add(key)
    if next_char() != "[":
      error = InputError("parse", "wrong_type", f"`{key}` must be an array")
      if bad is None:
        raise error
      bad.append((key, error))
      value(1)
      continue
    at += 1
    if next_char() == "]":
      at += 1
      continue
    while True:
      yield key, value(2)
      separator = _JSON_NEXT.match(text, at)
      if separator and separator.end() < len(text):  # within the window: the common case
        at = separator.end()
        if separator.group(1) == "]":
          break
        continue
      if next_char() == "]":
        at += 1
        break
      expect(",")
  at += 1
  if next_char():
    raise _NotStreamable("data after the top-level object")
  for name in sections:
    error = missing_section(name) if name not in found_sections else None
    if found is None and error:
      raise error


def missing_section(name: str) -> Optional[InputError]:
  """The error for a section the file lacks (None: `annotations` may be missing, as in COCO
  test-set files)."""
  if name in ("images", "categories"):
    return InputError("parse", "missing_field", f"the file has no `{name}` array")
  return None


def _entries_after(uri: str, section: str, done: int) -> List[Any]:
  """Fallback for what ijson refuses but Python's json accepts (NaN, Infinity, 1e400):
  load the whole file once and return the entries from `done` on."""
  import json

  from apache_beam.io.filesystems import FileSystems
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    doc = json.load(f)
  entries = doc.get(section, []) if isinstance(doc, dict) else None
  if not isinstance(entries, list):
    raise ValueError(f"`{section}` is not an array")
  return entries[done:]


# _JoinFile parses a file up to this size whole, with Python's json (C), where streaming it
# with ijson's events through Python took ~4x as long (11 MB, 20,000 images: 1.0 s against
# 0.3 s); the parsed document is ~7x the file's size, and is dropped once read.
WHOLE_JSON_BYTES = 32 << 20
_BRACKETS_ONLY = bytes(c for c in range(256) if c not in b'"[]{}\\')
_DIGITS = bytes.maketrans(b"0123456789E", b"0000000000e")


def _big_number(data: bytes) -> bool:
  """Whether the text may hold a number that json reads and ijson refuses: an exponent of 3
  digits (1e400) or 19 digits in a row (beyond 64 bits). Substring searches over the digits
  made alike (a regex took 0.65 s for 11 MB, this 30 ms); a match inside a string only
  sends the file to the streaming parser."""
  marks = data.translate(_DIGITS)
  return b"0" * 19 in marks or any(p in marks for p in (b"0e000", b"0e+000", b"0e-000"))


def whole_sections(data: bytes, sections: Sequence[str], found: set,
                   bad: List[Tuple[str, InputError]]) -> Optional[List[Tuple[str, list]]]:
  """(section, its entries) in the file's order: the entries stream_sections(..., found, bad)
  gives for this document, from Python's json. None when the two could differ and only
  streaming may read it: not an object, nesting deeper than MAX_DEPTH, a wanted section
  twice, a number json reads and ijson refuses (NaN, Infinity, a 3-digit exponent, 19 digits
  or more: after such a number the streaming path goes on with json.load, which treats a
  missing section differently), trailing data, or anything json refuses."""
  if _big_number(data) or _deeper_than(data, MAX_DEPTH):
    return None
  import gc
  enabled = gc.isenabled()
  gc.disable()  # json makes no cycles; collections while it allocated took 0.25 -> 0.55 s
  try:
    pairs = _top_level_pairs(data.decode("utf-8"))
  except (ValueError, RecursionError):
    return None
  finally:
    if enabled:
      gc.enable()
  if pairs is None:
    return None
  keys = [key for key, _ in pairs if key in sections]
  if len(keys) != len(set(keys)):
    return None
  result = []
  for key, value in pairs:
    if key not in sections:
      continue
    found.add(key)
    if not isinstance(value, list):
      bad.append((key, InputError("parse", "wrong_type", f"`{key}` must be an array")))
      continue
    result.append((key, value))
  return result


def _deeper_than(data: bytes, limit: int) -> bool:
  """Whether the JSON nests deeper than `limit` containers; True when unsure (escaped quotes,
  brackets inside strings). Brackets alone, strings emptied, then one level of empty pairs
  removed per pass: all in C, ~20 ms for 11 MB."""
  marks = data.translate(None, _BRACKETS_ONLY)
  if b"\\" in marks:
    return True
  marks = marks.replace(b'""', b"")  # strings without brackets in them: all, or unsure
  if b'"' in marks:
    return True
  marks = marks.replace(b"{", b"[").replace(b"}", b"]")
  for _ in range(limit):
    if not marks:
      return False
    marks = marks.replace(b"[]", b"")
  return bool(marks)


def _no_constant(name: str):
  raise ValueError(f"{name} is not JSON")  # ijson refuses NaN and Infinity


def _top_level_pairs(text: str) -> Optional[List[Tuple[str, Any]]]:
  """The (key, value) pairs of a JSON object in order, duplicates kept (as streaming sees
  them); None when `text` is not exactly one object. Values parsed by json's C scanner."""
  import json
  from json.decoder import WHITESPACE, scanstring
  decoder = json.JSONDecoder(parse_constant=_no_constant)
  skip = WHITESPACE.match
  i = skip(text, 0).end()
  if text[i:i + 1] != "{":
    return None
  i = skip(text, i + 1).end()
  pairs: List[Tuple[str, Any]] = []
  if text[i:i + 1] == "}":
    i += 1
  else:
    while True:
      if text[i:i + 1] != '"':
        return None
      key, i = scanstring(text, i + 1)
      i = skip(text, i).end()
      if text[i:i + 1] != ":":
        return None
      value, i = decoder.raw_decode(text, skip(text, i + 1).end())
      pairs.append((key, value))
      i = skip(text, i).end()
      if text[i:i + 1] == ",":
        i = skip(text, i + 1).end()
        continue
      if text[i:i + 1] != "}":
        return None
      i += 1
      break
  return pairs if skip(text, i).end() == len(text) else None


# Annotations are combined per image before the join, so that it sees one element per image
# rather than one per object (4.3 per image in the benchmark); the buffer is flushed at this
# many objects to bound memory on files like train2017 (860k annotations).
OBJECT_BUFFER = 200_000


_FORMAT_HINT = {"csv": "it looks like a CSV file; use --format csv",
                "xml": "it looks like XML; use --format voc"}


def check_input(uri: str) -> None:
  """Before running: `uri` is a COCO instances JSON with a non-empty `images` array.

  Reads at most LAUNCH_HEAD_BYTES, and only up to the `images` array (COCO files put it
  before `annotations`). What the head cannot tell (an `images` array further on, nesting
  past it, a syntax error, a NaN) is left to the workers, which stream the whole file with a
  depth limit and report per file what they could not read."""
  import ijson

  from beam_tfrecord.sources.checks import check_file, sniff_text
  from beam_tfrecord.storage.files import head
  check_file(uri, "--input")
  kind = sniff_text(head(uri))
  if kind != "json":
    raise UsageError(f"--input {uri} is not a COCO JSON file"
                     + (f": {_FORMAT_HINT[kind]}" if kind in _FORMAT_HINT else ""))
  try:
    with _head_of(uri) as f:
      # ijson's flat events, as stream_sections: ijson.parse's prefixes ('info.item.item...')
      # for each event of a 64 kB buffer at once cost the square of the depth (20,000 '['
      # took 1.2 GB, 200,000 were killed by the OOM killer)
      events = ijson.basic_parse(f, use_float=True)
      first = next(events)[0]
      if first != "start_map":
        raise UsageError(f"--input {uri} is a JSON {first.replace('start_', '')}, not a COCO "
                         "object with `images`, `annotations` and `categories`")
      depth, key = 1, None
      for event, value in events:
        if depth == 1 and event == "map_key":
          key = value
          continue
        if depth == 1 and key == "images":
          if event == "start_array" and next(events)[0] == "end_array":
            raise UsageError(f"--input {uri}: the `images` array is empty: no images to "
                             "convert")
          return  # images found (or of a wrong type, which the pipeline reports)
        if event in ("start_map", "start_array"):
          depth += 1
          if depth > MAX_DEPTH:
            return  # too deep: the pipeline reports it (too_deep)
        elif event in ("end_map", "end_array"):
          depth -= 1
  except UsageError:
    raise
  except Exception:
    return  # malformed, NaN, or the head ends first: the workers report what they find
  raise UsageError(f"--input {uri} has no `images` array: not a COCO instances file")


# What the launcher (the process that builds the pipeline) reads of an annotation file at
# most: the scale rules say it reads nothing whole (train2017 is 450 MB; a file of 100M
# images, tens of GB). Checks that need more (category id 0 in use, nesting past the head)
# are the workers'.
LAUNCH_HEAD_BYTES = 4 << 20


class _Head:
  """The first `limit` bytes of an open file, as a file (all that ijson asks of one): reads
  stop there, so a parser fed this sees the head end as the end of the file."""

  def __init__(self, f, limit: int):
    self._f, self._left = f, limit

  def read(self, size: int = -1) -> bytes:
    size = self._left if size < 0 else min(size, self._left)
    data = self._f.read(size) if size else b""
    self._left -= len(data)
    return data


@contextlib.contextmanager
def _head_of(uri: str, limit: Optional[int] = None) -> Iterator[_Head]:
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    yield _Head(f, LAUNCH_HEAD_BYTES if limit is None else limit)


class _ParseSection(beam.DoFn):
  """(split, json_uri, image_root, section) -> tagged small records.

  images: ((uri, image_id), (split, image_root, file_name, width, height));
  objects: ((uri, image_id), ((index, category_id, (x0, y0, x1, y1), is_crowd, area, id,
  segmentation), ...)), several per image only when the buffer was flushed between its
  annotations (id and segmentation from annotation_extras);
  categories: ((uri, category_id), name);
  zero, without --label-map (drop_background), for _zero_verdict: (uri, ('used', index)) for
  the first annotation with category_id 0, (uri, ('defined', index, name)) for a category 0.
  """

  flush_objects = True  # _JoinFile keeps every object until the file is read

  def __init__(self, allow_absolute: bool, drop_background: bool = False,
               include_masks: bool = False):
    self.allow_absolute = allow_absolute
    self.drop_background = drop_background
    self.include_masks = include_masks

  def _keep(self, buffer, image_id: int, chunk: Tuple) -> None:
    buffer.setdefault(image_id, []).append(chunk)

  def _flush(self, uri, buffer):
    for image_id, objects in buffer.items():
      yield beam.pvalue.TaggedOutput("objects", ((uri, image_id), tuple(objects)))
    buffer.clear()

  def _emit(self, uri, split, image_root, section, index, record, buffer):
    parse = {"images": parse_image, "annotations": annotation_fields,
             "categories": parse_category}[section]
    try:
      parsed = parse(record)
    except InputError as e:
      level = {"images": "image", "annotations": "object"}.get(section, "file")
      yield beam.pvalue.TaggedOutput("errors", e.record(
          f"{uri}#{section}[{index}]", _best_key(uri, record), level=level))
      return
    if section == "images":
      image_id, file_name, width, height = parsed
      yield ((uri, image_id), (split, image_root, file_name, width, height))
    elif section == "annotations":
      # the index keeps the file's object order through the shuffle; the box travels as a
      # plain tuple (a dataclass would be pickled); extras: (id, segmentation)
      image_id, category_id, box, is_crowd, area = parsed
      if category_id == 0 and self.drop_background and self._zero_used is None:
        self._zero_used = index  # the run fails (category_zero)
      extras = annotation_extras(record, self.include_masks)
      self._keep(buffer, image_id, (index, category_id, box, is_crowd, area, *extras))
      self._buffered += 1
      if self.flush_objects and self._buffered >= OBJECT_BUFFER:
        self._buffered = 0
        yield from self._flush(uri, buffer)
    elif parsed[0] == 0 and self.drop_background:
      self._zero_defined.append((index, parsed[1]))  # dropped: warned of once 0 is known unused
    else:
      yield beam.pvalue.TaggedOutput("categories", ((uri, parsed[0]), parsed[1]))

  def process(self, task):
    split, uri, image_root, section = task
    buffer: Dict[int, List[Tuple]] = {}
    self._buffered = 0
    self._zero_used, self._zero_defined = None, []
    yield from self._parse(uri, split, image_root, section, buffer)
    yield from self._flush(uri, buffer)
    # the annotations and the categories are read by different tasks: _zero_verdict meets them
    if self._zero_used is not None:
      yield beam.pvalue.TaggedOutput("zero", (uri, ("used", self._zero_used)))
    for index, name in self._zero_defined:
      yield beam.pvalue.TaggedOutput("zero", (uri, ("defined", index, name)))

  def _parse(self, uri, split, image_root, section, buffer):
    from apache_beam.io.filesystems import FileSystems
    done = 0
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        for record in stream_section(f, section):
          yield from self._emit(uri, split, image_root, section, done, record, buffer)
          done += 1
      return
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except Exception as e:  # ijson's syntax errors, an unreadable file
      streaming_error = f"{type(e).__name__}: {e}"
    yield from self._go_on(uri, split, image_root, section, done, streaming_error, buffer)

  def _go_on(self, uri, split, image_root, section, done, streaming_error, buffer):
    """After a streaming error: the section's entries from `done` on, from Python's json."""
    try:
      rest = _entries_after(uri, section, done)
    except Exception as e:  # truly malformed: report, keep what was read
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="malformed_json", key=uri, level="file",
          message=f"{section} after entry {done}: {streaming_error}; {type(e).__name__}: {e}"))
      return
    for index, record in enumerate(rest, start=done):
      yield from self._emit(uri, split, image_root, section, index, record, buffer)


_SPILLED = struct.Struct("<qqq4dBdq")  # image id, index, category, box, flags, area, id
_CROWD, _AREA, _ID = 1, 2, 4


def _pack_object(image_id: int, chunk: Tuple) -> Optional[bytes]:
  """An object chunk without segmentation and its image id as 73 bytes (~400 as tuples);
  None when it cannot be packed (a segmentation, an integer beyond 64 bits)."""
  index, category_id, box, is_crowd, area, ann_id, segmentation = chunk
  if segmentation is not None:
    return None
  flags = (_CROWD if is_crowd else 0) | (_AREA if area is not None else 0) | (
      _ID if ann_id is not None else 0)
  try:
    return _SPILLED.pack(image_id, index, category_id, *box, flags, area or 0.0, ann_id or 0)
  except struct.error:
    return None


# _JoinFile's spill: image ids in at least SPILL_PARTITIONS partitions, one more per
# PARTITION_BYTES of the file (memory held by one partition's join stays ~3x that), at most
# MAX_PARTITIONS; images and objects buffered in memory up to SPILL_BUFFER_BYTES before they
# are written to local disk.
SPILL_PARTITIONS = 64
PARTITION_BYTES = 4 << 20
MAX_PARTITIONS = 4096
SPILL_BUFFER_BYTES = 8 << 20
_MIX, _MASK = 0x9E3779B97F4A7C15, (1 << 64) - 1  # Fibonacci hashing: strided ids spread too


class _JoinBuffer:
  """The images and objects of one COCO file by partition of image id, joined one partition
  at a time once the file (its categories last) is read.

  Held in memory up to `buffer_bytes` (estimated), then appended to a storage.spill.Spill as
  one record per partition and kind: partition p holds marshal dumps of image tuples
  (image_id, file_name, width, height), n + p _SPILLED objects, 2n + p marshal dumps of
  (image_id, chunk) for the objects that do not pack. A file that fits the buffer never
  touches the disk. close() removes the spill directory."""

  def __init__(self, partitions: int, buffer_bytes: int):
    self.partitions, self.buffer_bytes = partitions, buffer_bytes
    self.images: List[List[Tuple]] = [[] for _ in range(partitions)]
    self.packed = [bytearray() for _ in range(partitions)]
    self.loose: List[List[Tuple]] = [[] for _ in range(partitions)]
    self.held = 0
    self.spill = None

  def add_image(self, image_id: int, file_name: str, width, height) -> None:
    self.images[((image_id * _MIX) & _MASK) * self.partitions >> 64].append(
        (image_id, file_name, width, height))
    self.held += 160 + len(file_name)  # a tuple, its name and numbers in memory
    if self.held >= self.buffer_bytes:
      self.flush()

  def add_object(self, image_id: int, chunk: Tuple) -> None:
    partition = ((image_id * _MIX) & _MASK) * self.partitions >> 64
    packed = _pack_object(image_id, chunk)
    if packed is not None:
      self.packed[partition] += packed
      self.held += 73
    else:
      self.loose[partition].append((image_id, chunk))
      self.held += 400 + len(chunk[6] or "")
    if self.held >= self.buffer_bytes:
      self.flush()

  def flush(self) -> None:
    """Everything held goes to the spill files."""
    from beam_tfrecord.storage.spill import Spill
    n = self.partitions
    if self.spill is None:
      self.spill = Spill(3 * n, buffer_bytes=self.buffer_bytes, prefix="coco")
    for p in range(n):
      if self.images[p]:
        self.spill.add(p, marshal.dumps(self.images[p]))
        self.images[p] = []
      if self.packed[p]:
        self.spill.add(n + p, bytes(self.packed[p]))
        self.packed[p] = bytearray()
      if self.loose[p]:
        self.spill.add(2 * n + p, marshal.dumps(self.loose[p]))
        self.loose[p] = []
    self.spill.flush()
    self.held = 0

  def partition(self, p: int) -> Tuple[Dict[int, List[Tuple]], Dict[int, List[Tuple]]]:
    """({image_id: [(file_name, width, height), ...]}, {image_id: [chunk, ...]}) of partition
    p, from its spill files and what is still held (then dropped); objects in file order."""
    n, spill = self.partitions, self.spill
    images: Dict[int, List[Tuple]] = {}
    batches = [marshal.loads(b) for b in spill.read(p)] if spill else []
    batches.append(self.images[p])
    self.images[p] = []
    for batch in batches:
      for image_id, file_name, width, height in batch:
        found = images.get(image_id)
        if found is None:
          images[image_id] = [(file_name, width, height)]
        else:
          found.append((file_name, width, height))
    del batches
    data = b"".join([*(spill.read(n + p) if spill else ()), self.packed[p]])
    self.packed[p] = bytearray()
    objects: Dict[int, List[Tuple]] = {}
    for image_id, index, category_id, x0, y0, x1, y1, flags, area, ann_id in \
        _SPILLED.iter_unpack(data):
      chunk = (index, category_id, (x0, y0, x1, y1), bool(flags & _CROWD),
               area if flags & _AREA else None, ann_id if flags & _ID else None, None)
      kept = objects.get(image_id)
      if kept is None:
        objects[image_id] = [chunk]
      else:
        kept.append(chunk)
    del data
    loose = [marshal.loads(b) for b in spill.read(2 * n + p)] if spill else []
    loose.append(self.loose[p])
    self.loose[p] = []
    for batch in loose:
      for image_id, chunk in batch:
        objects.setdefault(image_id, []).append(chunk)
    return images, objects

  def close(self) -> None:
    if self.spill is not None:
      self.spill.close()


def _all_entries(uri: str, found: set, bad: List[Tuple[str, InputError]]
                 ) -> Iterator[Tuple[str, Any]]:
  """stream_sections(file, SECTIONS, found, bad) of the file at `uri`: through
  whole_sections when the file is at most WHOLE_JSON_BYTES and it may, else streamed by
  fast_sections, going on from the bytes already read. Where fast_sections cannot be sure to
  read what ijson reads, the file is streamed again with ijson (stream_sections), from the
  start, and the entries not given yet follow, with ijson's own errors."""
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    head = f.read(WHOLE_JSON_BYTES + 1)
    whole = (whole_sections(head, SECTIONS, found, bad) if len(head) <= WHOLE_JSON_BYTES
             else None)
    if whole is not None:
      del head
      for section, entries in whole:
        for entry in entries:
          yield section, entry
      return
    given: Dict[str, int] = {}
    try:
      for section, entry in fast_sections(_ReadOn(head, f), SECTIONS, found=found, bad=bad):
        given[section] = given.get(section, 0) + 1
        yield section, entry
      return
    except _NotStreamable:
      pass  # what ijson would stop at, or not JSON: ijson decides, from the start
  found.clear()
  del bad[:]
  seen: Dict[str, int] = {}
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    for section, entry in stream_sections(f, SECTIONS, found=found, bad=bad):
      seen[section] = seen.get(section, 0) + 1
      if seen[section] > given.get(section, 0):  # the entries not given already
        yield section, entry


class _ReadOn:
  """A file of which `head` was read already: read() gives those bytes first, then the rest
  of the file (all that ijson asks of a file)."""

  def __init__(self, head: bytes, rest):
    self._head, self._at, self._rest = head, 0, rest

  def read(self, size: int = -1) -> bytes:
    if self._at < len(self._head):
      end = len(self._head) if size < 0 else self._at + size
      chunk = self._head[self._at:end]
      self._at += len(chunk)
      if self._at >= len(self._head):
        self._head, self._at = b"", 0  # consumed: not held while the rest streams
      return chunk + self._rest.read() if size < 0 else chunk
    return self._rest.read(size)


class _JoinFile(_ParseSection):
  """(split, json_uri, image_root) -> ImageAnnotation; tagged: categories ((uri, id), name) and
  errors, as ReadCoco's distributed path gives them.

  The whole file in one pass over its bytes, joined here: one element per image from the
  start, where the distributed path parses the file once per section and meets images and
  their objects in a CoGroupByKey. COCO's categories come last, so images and objects wait in
  a _JoinBuffer, spilled to local disk by partition of image id past `buffer_bytes`, and are
  joined one partition at a time: memory is bounded by the buffer plus one partition, not by
  the file. Used for every file on the in-process runner (one stage at a time, one thread).
  Images come out by partition, not in the file's order.
  """

  flush_objects = False

  def __init__(self, allow_absolute: bool, follow_symlinks: bool = False,
               drop_background: bool = False, include_masks: bool = False,
               partitions: int = SPILL_PARTITIONS, buffer_bytes: int = SPILL_BUFFER_BYTES):
    super().__init__(allow_absolute, drop_background, include_masks)
    self.follow_symlinks = follow_symlinks
    self.partitions, self.buffer_bytes = partitions, buffer_bytes

  def _keep(self, buffer, image_id: int, chunk: Tuple) -> None:
    buffer.add_object(image_id, chunk)

  def _partitions(self, uri: str) -> int:
    try:
      from apache_beam.io.filesystems import FileSystems
      size = FileSystems.get_filesystem(uri).size(uri)
    except Exception:  # missing or unreadable: parsing reports it
      size = 0
    return min(MAX_PARTITIONS, max(self.partitions, -(-size // PARTITION_BYTES)))

  def process(self, task):
    split, uri, image_root = task
    buffer = _JoinBuffer(self._partitions(uri), self.buffer_bytes)
    names: Dict[Tuple[str, int], List[str]] = {}
    self._buffered = 0
    self._zero_used, self._zero_defined = None, []
    try:
      for out in self._parse_all(uri, split, image_root, buffer):
        if not isinstance(out, beam.pvalue.TaggedOutput):
          (_, image_id), (_, _, file_name, width, height) = out
          buffer.add_image(image_id, file_name, width, height)
          continue
        if out.tag == "categories":
          names.setdefault(out.value[0], []).append(out.value[1])
        yield out
      for error in category_zero(uri, self._zero_used, self._zero_defined):
        yield beam.pvalue.TaggedOutput("errors", error)
      categories = {key: min(found) for key, found in names.items()}  # as PickCategory
      for p in range(buffer.partitions):
        images, objects = buffer.partition(p)
        for image_id, found in images.items():
          kept = objects.pop(image_id, None)
          yield from join_image(
              ((uri, image_id), {"image": [(split, image_root, *f) for f in found],
                                 "objects": [kept] if kept else []}),
              categories, self.allow_absolute, self.follow_symlinks)
        for image_id, kept in objects.items():  # objects of an unknown image: reported
          yield from join_image(((uri, image_id), {"image": [], "objects": [kept]}),
                                categories, self.allow_absolute, self.follow_symlinks)
    finally:
      buffer.close()

  def _parse_all(self, uri, split, image_root, buffer):
    """_parse for every section in one pass; after a streaming error, each section goes on
    from where it was, as the per-section tasks do."""
    done = dict.fromkeys(SECTIONS, 0)
    found: set = set()
    bad: List[Tuple[str, InputError]] = []
    streaming_error = None
    try:
      for section, record in _all_entries(uri, found, bad):
        yield from self._emit(uri, split, image_root, section, done[section], record, buffer)
        done[section] += 1
    except InputError as e:  # not an object, too deep
      for _ in SECTIONS:  # each section's task reports it
        yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except Exception as e:  # ijson's syntax errors, an unreadable file
      streaming_error = f"{type(e).__name__}: {e}"
    for _, error in bad:  # a section that is not an array
      yield beam.pvalue.TaggedOutput("errors", error.record(uri, uri, level="file"))
    for section in SECTIONS:
      if streaming_error is not None:
        if section not in dict(bad):
          yield from self._go_on(uri, split, image_root, section, done[section],
                                 streaming_error, buffer)
        continue
      error = None if section in found else missing_section(section)
      if error:
        yield beam.pvalue.TaggedOutput("errors", error.record(uri, uri, level="file"))


def _best_key(uri: str, entry: Any) -> str:
  """The key of an error about one entry: an image entry's file_name when it has one, else the
  annotation file (error records never go without a key)."""
  name = entry.get("file_name") if isinstance(entry, dict) else None
  return name if isinstance(name, str) and name else uri


def _duplicate_category(element):
  """A category id given two different names in one file is reported; the smallest name
  (the one PickCategory keeps) is used."""
  (uri, category_id), names = element
  names = sorted(set(names))
  if len(names) > 1:
    yield ErrorRecord(source=uri, stage="parse", reason="duplicate_category_id", key=uri,
                      level="file",
                      message=f"category id {category_id} is named {names}; {names[0]!r} is used")


_INDEX = operator.itemgetter(0)


def join_image(element, categories: Dict[Tuple[str, int], str], allow_absolute: bool,
               follow_symlinks: bool = False):
  """((uri, image_id), {'image': [...], 'objects': [chunk, ...]}) -> ImageAnnotation | errors.

  A chunk is a tuple of (index, category_id, (x0, y0, x1, y1), is_crowd, area, id,
  segmentation)."""
  (uri, image_id), grouped = element
  images = list(grouped["image"])
  objects = [o for chunk in grouped["objects"] for o in chunk]
  source = f"{uri}#image_id={image_id}"
  if not images:
    for index, *_ in sorted(objects, key=lambda o: o[0]):  # one record per lost object
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=f"{uri}#annotations[{index}]", stage="parse", reason="unknown_image_id",
          key=uri, level="object", message=f"the annotation refers to image id {image_id}, "
          "which is not in `images`"))
    return
  split, image_root, file_name, width, height = (images[0] if len(images) == 1 else
                                                 min(images, key=repr))
  if len(images) > 1:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=source, stage="parse", reason="duplicate_image_id", key=str(file_name),
        level="warning",
        message=f"image id {image_id} appears {len(images)} times; the first is used"))
  try:
    key, image_uri, size = paths.resolve_sized(image_root, file_name, allow_absolute,
                                               follow_symlinks)
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(source, file_name))
    return
  objs: List[ObjectAnnotation] = []
  if len(objects) > 1:
    objects.sort(key=_INDEX)
  for _, category_id, box, is_crowd, area, ann_id, segmentation in objects:
    name = categories.get((uri, category_id))
    if name is None:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=source, stage="parse", reason="unknown_category_id", key=key, level="object",
          message=f"annotation of {file_name!r} has category_id {category_id}, "
          "which is not in `categories`"))
      continue
    objs.append(ObjectAnnotation(label=name, box=Box(*box), is_crowd=is_crowd, area=area,
                                 id=ann_id, segmentation=segmentation))
  yield ImageAnnotation(key=key, uri=image_uri, source_id=str(image_id), source=uri,
                        objects=tuple(objs), split=split, width=width, height=height,
                        size_bytes=size)


# The reason of the error that fails a run whose annotations use category id 0 with no
# --label-map: finalize/manifest.USAGE_REASONS makes it exit 2, and the CLI's last line is
# this record's key (the file) and message (what to do).
CATEGORY_ZERO_USED = "category_zero_used"


def category_zero(uri: str, used: Optional[int], defined: Sequence[Tuple[int, str]]
                  ) -> Iterator[ErrorRecord]:
  """What a file's category id 0 comes to without --label-map (0 is background in the TF OD
  API, the dataset's name in Roboflow exports): `used`, the index of the first annotation
  with category_id 0 (None: none has), fails the run; else each category 0 of `defined`
  ((index in `categories`, name)) is dropped with a warning."""
  if used is not None:
    yield ErrorRecord(
        source=f"{uri}#annotations[{used}]", stage="parse", reason=CATEGORY_ZERO_USED, key=uri,
        level="file", message="annotations use category id 0, which the TF OD API reserves "
        "for background; give --label-map with an id >= 1 for that category's name")
    return
  for index, name in sorted(defined):
    yield ErrorRecord(
        source=f"{uri}#categories[{index}]", stage="parse", reason="background_category",
        key=uri, level="warning", message=f"category id 0 ({name!r}) is used by no "
        "annotation and id 0 means background in the TF OD API: dropped (Roboflow exports name "
        "the dataset this way)")


def _zero_verdict(element) -> Iterator[ErrorRecord]:
  """(uri, [('used', index) | ('defined', index, name), ...]) from the section tasks ->
  category_zero's records."""
  uri, notes = element
  used = [note[1] for note in notes if note[0] == "used"]
  yield from category_zero(uri, min(used) if used else None,
                           [(note[1], note[2]) for note in notes if note[0] == "defined"])


def detect(path: str) -> Optional[str]:
  """--format auto: a COCO JSON (a .json with `images`/`annotations`), or a folder holding
  Roboflow's _annotations.coco.json."""
  from beam_tfrecord.storage.files import list_dir
  if path.lower().endswith(".json"):
    return "COCO JSON" if _top_keys(path) & {"images", "annotations"} else None
  if "_annotations.coco.json" in list_dir(path)[1]:
    return "_annotations.coco.json"
  return None


def _top_keys(uri: str, limit: int = 1_000_000) -> set:
  """Top-level keys of a JSON object, streaming; stops at `images` or `annotations`, at
  `limit` events or at LAUNCH_HEAD_BYTES (--format auto runs on the launcher)."""
  import ijson
  keys: set = set()
  depth = 0
  try:
    with _head_of(uri) as f:
      for n, (event, value) in enumerate(ijson.basic_parse(f)):
        if n == 0 and event != "start_map":
          break
        if event in ("start_map", "start_array"):
          depth += 1
        elif event in ("end_map", "end_array"):
          depth -= 1
        elif event == "map_key" and depth == 1:
          keys.add(value)
          if value in ("images", "annotations"):
            break
        if n > limit:
          break
  except Exception:  # not JSON: not COCO
    pass
  return keys


class ReadCoco(beam.PTransform):
  """COCO instances JSON files -> SourceOutput.

  In: `inputs`, a list of (split or None, json_uri, image_root). Out: one ImageAnnotation per
  COCO image (images without annotations included), ErrorRecords, and (name, category_id)
  pairs, so that label ids keep COCO's category ids. With drop_background (no --label-map),
  a category with id 0 is dropped with a warning when no annotation uses it, and a file whose
  annotations use it gives a category_zero_used error, which fails the run (category_zero).
  With include_masks each object carries its `segmentation` (as compact JSON) for the writer
  to rasterize. join_in_worker (the in-process runner): each file is read and joined by one
  _JoinFile, in bounded memory; else a task per file and section, and a CoGroupByKey.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               drop_background: bool = False, include_masks: bool = False,
               join_in_worker: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.drop_background = drop_background
    self.include_masks = include_masks
    self.join_in_worker = join_in_worker  # every file through _JoinFile

  def expand(self, root):
    whole = self.inputs if self.join_in_worker else []
    streamed = [] if self.join_in_worker else self.inputs
    images, categories, errors = [], [], []
    if whole:
      files = (root
               | "Files" >> beam.Create(whole)
               | "JoinFiles" >> beam.ParDo(_JoinFile(
                   self.allow_absolute, self.follow_symlinks, self.drop_background,
                   self.include_masks)).with_output_types(ImageAnnotation).with_outputs(
                   "categories", "errors", main="images"))
      images.append(files.images)
      categories.append(files.categories)
      errors.append(files.errors)
    if streamed:
      tasks = [(split, uri, image_root, section)
               for split, uri, image_root in streamed for section in SECTIONS]
      parsed = (root
                | "Tasks" >> beam.Create(tasks)
                | "Spread" >> beam.Reshuffle()
                | "Stream" >> beam.ParDo(_ParseSection(
                    self.allow_absolute, self.drop_background, self.include_masks))
                .with_outputs("objects", "categories", "errors", "zero", main="images"))
      categories.append(parsed.categories)
      errors.append(parsed.errors)
      errors.append(parsed.zero  # at most 2 per file and category 0, usually none
                    | "GroupZero" >> beam.GroupByKey()
                    | "CategoryZero" >> beam.FlatMap(_zero_verdict))
    if len(categories) > 1:
      categories = [tuple(categories) | "AllCategories" >> beam.Flatten()]
    grouped = categories[0] | "GroupCategories" >> beam.GroupByKey()
    by_key = grouped | "PickCategory" >> beam.MapTuple(lambda k, names: (k, min(names)))
    errors.append(grouped | "DuplicateCategories" >> beam.FlatMap(_duplicate_category))
    if streamed:
      joined = ({"image": parsed.images, "objects": parsed.objects}
                | "GroupByImage" >> beam.CoGroupByKey()
                | "Join" >> beam.FlatMap(join_image, beam.pvalue.AsDict(by_key),
                                         self.allow_absolute, self.follow_symlinks)
                .with_output_types(ImageAnnotation).with_outputs("errors", main="images"))
      images.append(joined.images)
      errors.append(joined.errors)
    if len(images) > 1:
      images = [tuple(images) | "Images" >> beam.Flatten().with_output_types(ImageAnnotation)]
    names = by_key | "Names" >> beam.MapTuple(lambda uri_id, name: (name, uri_id[1]))
    return SourceOutput(images=images[0], errors=tuple(errors) | "Errors" >> beam.Flatten(),
                        categories=names)


# --- the source protocol (sources/registry.py) ---

MASKS = True  # segmentations: --include-masks rasterizes them
EXPORT_FILE = "_annotations.coco.json"  # the file in each split folder of a Roboflow export


def check(config) -> None:
  """Only what the head of each file tells (check_input); category id 0 in use without
  --label-map is found by the workers (category_zero), and fails the run before the output is
  replaced."""
  for item in config.inputs:
    check_input(paths.parse_assignment(item)[1])


def possible_splits(config) -> Optional[set]:
  return {split or DEFAULT_SPLIT for split, _, _ in config.file_inputs()}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  inputs = config.file_inputs()
  return (root | "ReadCoco" >> ReadCoco(inputs, config.allow_absolute_paths,
                                        config.follow_symlinks,
                                        drop_background=not config.label_map,
                                        include_masks=config.include_masks,
                                        join_in_worker=local),
          sorted({s for s, _, _ in inputs if s}))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotation file; the image roots (default: each annotation file's directory)."""
  inputs = config.file_inputs()
  return [("file", uri) for _, uri, _ in inputs], [root for _, _, root in inputs]

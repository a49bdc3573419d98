"""The fast parse path: COCO's entries parsed by json's C scanner from a window of the file,
read as stream_sections reads them; where the two could differ it stops (_NotStreamable) and
the caller re-streams with ijson. Beam-free."""
from __future__ import annotations

import codecs
import gc
import math
import re
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import depth
from beam_tfrecord.sources.coco.stream import MAX_DEPTH, missing_section

# fast_sections reads the file in blocks of this many bytes (one block's text in memory, plus
# the entry that straddles its end)
FAST_BLOCK_BYTES = 4 << 20
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_NEXT = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")  # after an array entry


FAST_ENTRY_CHARS = 64 << 20  # an entry still unparsed past this: not read further here

# Numbers json reads and ijson refuses: integers beyond 64 bits (19 digits or more in a run
# that no '.' precedes: fraction digits never overflow) and floats beyond double range (an
# exponent of 3 digits or more). Found by substring searches in C over the digits made alike,
# each fraction's first 19 digits masked, so that only the rare hits are looked at in Python.
# Full-precision floats (0.0032813328138359132: 19 fraction digits) used to send every 4 MB
# block through a regex, and the file back to ijson where a fraction's digits read as an
# integer past 2**63 (see fast_sections).
_DIGITS = bytes.maketrans(b"0123456789E", b"0000000000e")
_RUN = b"0" * 19
_SUSPECTS = (_RUN, b"e000", b"e+000", b"e-000")  # an exponent follows a digit, or is in a string
_NUMBER_CHARS = frozenset(b"0123456789+-.eE")


def _ijson_refuses(data: bytes) -> bool:
  """Whether the bytes may hold a number ijson refuses (|int| >= 2**63, a float beyond
  double range); a hit inside a string, or a number cut at the start of `data`, only sends
  the file the slower way. First a yes/no over the digits with the signs dropped (one
  exponent search instead of three: ~25 ms a 4 MB block of full-precision floats), then
  where each hit is."""
  marks = data.translate(_DIGITS, b"+-")
  if _RUN in marks:
    marks = marks.replace(b"." + _RUN, b"." * 20)
  if _RUN not in marks and b"e000" not in marks:
    return False
  marks = data.translate(_DIGITS)
  if _RUN in marks:  # fractions masked in place (same length); longer ones skipped below
    marks = marks.replace(b"." + _RUN, b"." * 20)
  for suspect in _SUSPECTS:
    at = marks.find(suspect)
    while at >= 0:
      start, end = at, at + len(suspect)
      while start and data[start - 1] in _NUMBER_CHARS:
        start -= 1
      while end < len(data) and data[end] in _NUMBER_CHARS:
        end += 1
      fraction = suspect is _RUN and marks[at - 1:at] == b"."  # the rest of a masked one
      if not fraction and _refused(data[start:end]):
        return True
      at = marks.find(suspect, end)
  return False


def _refused(token: bytes) -> bool:
  """Whether ijson refuses a number json reads (anything unreadable counts as refused)."""
  try:
    if b"." in token or b"e" in token or b"E" in token:
      return math.isinf(float(token))
    return not -2**63 < int(token) < 2**63
  except ValueError:  # not one number, or past int()'s digit limit
    return True


_BRACKETS_ONLY = bytes(c for c in range(256) if c not in b'"[]{}')  # to delete


def _deeper_than(data: bytes, limit: int) -> bool:
  """Whether the JSON nests deeper than `limit` containers; True when unsure (brackets
  inside strings). Escapes dropped, brackets alone, strings emptied, then one level of empty
  pairs removed per pass: all in C, ~20 ms for 11 MB."""
  if b"\\" in data:  # \\ then \" (a run of backslashes is read left to right, as json does)
    data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
  marks = data.translate(None, _BRACKETS_ONLY)
  marks = marks.replace(b'""', b"")  # strings without brackets in them: all, or unsure
  if b'"' in marks:
    return True
  marks = marks.replace(b"{", b"[").replace(b"}", b"]")
  for _ in range(limit):
    if not marks:
      return False
    marks = marks.replace(b"[]", b"")
  return bool(marks)


class _NotStreamable(ValueError):
  """fast_sections met what ijson's stream would stop at (a number json reads and ijson
  refuses, or text that is not JSON): the caller goes on as after a streaming error."""


def _refuse_constant(name: str):
  raise _NotStreamable(f"{name} is not JSON")  # ijson refuses NaN and Infinity


def fast_sections(fileobj, sections: Sequence[str], max_depth: int = MAX_DEPTH,
                  found: Optional[set] = None,
                  bad: Optional[List[Tuple[str, InputError]]] = None,
                  block: int = FAST_BLOCK_BYTES) -> Iterator[Tuple[str, Any]]:
  """stream_sections' entries, parsed by Python's json (C) from a window of the file: the
  top-level object is walked here; each array's whole entries up to the window's last '},'
  are one scan call (batch), the rest one call each (value). Memory: one block and one
  batch's objects (~7x its text; the whole-file parse it replaces held up to 32 MB x 7).
  CPU seconds for 50,000 images, entries consumed one at a time
  (benchmarks/coco_parse.py, medians of 5 interleaved rounds, 2026-11-25, load 2.1 -> 1.1):

    coordinates        MB   stream  scan  before (whole file under 32 MB, regex check)
    integers           14    1.65   0.49   0.71
    + polygons         22    2.91   0.66   1.18
    2 decimals         16    1.62   0.46   0.89
    + polygons         29    2.88   1.15   2.17
    full precision     22    1.58   0.85   3.24
    + polygons         54    2.28   1.65   5.42
  ijson.items (C backend), one pass per section, each entry through depth.check: 1.23,
  2.20, 1.49, 3.03, 1.58, 3.33 s, slower than scan everywhere (and see stream.py).

  What ijson would refuse (NaN, Infinity, integers beyond 64 bits, floats beyond double
  range: checked on each block's bytes before its entries are read) or any text that is not
  JSON (or an entry over FAST_ENTRY_CHARS) raises _NotStreamable (a ValueError) before the
  entry it is in: the caller goes on as after a streaming error, from the entries read so
  far. An entry nesting deeper than max_depth is given as InputError too_deep, as
  stream_sections gives it."""
  import json
  import json.scanner
  wanted = set(sections)
  found_sections: set = found if found is not None else set()
  # the decoder's C scanner itself: raw_decode is a Python frame around it
  scan = json.scanner.make_scanner(json.JSONDecoder(parse_constant=_refuse_constant))
  text_of = codecs.getincrementaldecoder("utf-8")()
  text, at, ended, tail = "", 0, False, b""

  def read_more() -> None:
    nonlocal text, at, ended, tail, reads
    reads += 1
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

  def value(level: int, checked: bool = True) -> Any:
    """The JSON value at the current position, whole; InputError too_deep in its place when
    it nests deeper than max_depth allows at `level` (and `checked`: values outside the
    sections are not kept, so their depth does not matter)."""
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
      except RecursionError:  # no end known to skip to: ijson's stream skips the entry
        raise _NotStreamable("nests deeper than json's scanner goes") from None
      except _NotStreamable:
        raise
      except (StopIteration, ValueError):
        if ended or len(text) - at > FAST_ENTRY_CHARS:
          raise _NotStreamable("not JSON") from None
      read_more()
    start, at = at, end
    # nesting is at most the brackets the text opens (two counts in C); only an entry with
    # more is walked
    if (checked and isinstance(result, (dict, list)) and
        text.count("[", start, end) + text.count("{", start, end) > max_depth - level and
        depth.nests_deeper(result, max_depth - level)):
      return depth.too_deep(max_depth)  # this entry alone is rejected
    return result

  tried = -1  # the window (reads so far) whose batch failed: entries one at a time there
  reads = 0

  def batch(level: int) -> Tuple[list, bool]:
    """(entries, whether the array ended): the entries from the current position to the
    window's last '},' (or to the array's end, when that comes first) parsed in one scan
    call; ([], False) when there are none, or they are not exactly whole entries, or may nest
    too deep: value() then reads them one at a time and raises what it finds. 2-3x fewer
    Python steps an entry than value()."""
    nonlocal at, tried
    end = text.rfind("},", at) + 1 if tried != reads else 0
    if not end:
      return [], False
    entries = "[" + text[at:end] + "]"
    enabled = gc.isenabled()
    gc.disable()  # json makes no cycles; collections while it allocated took 0.25 -> 0.55 s
    try:
      result, stop = scan(entries, 0)  # stops at the array's own ']' when the window has it
    except (ValueError, StopIteration, RecursionError):  # _NotStreamable is a ValueError
      result, stop = None, -1
    finally:
      if enabled:
        gc.enable()
    if stop < 0 or _deeper_than(entries[:stop].encode("utf-8"), max_depth - level + 1):
      tried = reads
      return [], False
    closed = stop < len(entries)
    at = at + stop - 1 if closed else end + 1  # past the array's ']', or past the ','
    return result, closed

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
      value(1, checked=False)
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
      value(1, checked=False)
      continue
    at += 1
    if next_char() == "]":
      at += 1
      continue
    while True:
      entries, closed = batch(2)
      for entry in entries:
        yield key, entry
      if closed:
        break
      if entries:
        continue
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


"""The lines of an NDJSON export: those of a byte range (storage.lines), and one line as its
JSON object, within the budgets of one data row. Pure and Beam-free."""
from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Tuple, Union

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import depth
from beam_tfrecord.storage import lines

# Budgets of one data row. A line holds one image's labels: 16 MB is ~500,000 polygon points
# (json.loads holds ~10x the line). Export v2 nests ~10 deep for a polygon point; nested
# classifications add ~3 levels each.
MAX_LINE_BYTES = 16 << 20
MAX_JSON_DEPTH = 64
BOM = b"\xef\xbb\xbf"


def load_line(raw: bytes) -> Dict[str, Any]:
  """One NDJSON line -> its JSON object. InputError: 'too_large' (over MAX_LINE_BYTES),
  'malformed_json' (not JSON, not UTF-8, not an object), 'too_deep' (over MAX_JSON_DEPTH:
  sources.depth)."""
  if len(raw) > MAX_LINE_BYTES:
    raise InputError("parse", "too_large", f"the line has {len(raw)} bytes, over the "
                     f"{MAX_LINE_BYTES} a data row may have")
  doc = depth.loads(raw, MAX_JSON_DEPTH)
  if not isinstance(doc, dict):
    raise InputError("parse", "malformed_json",
                     f"the line is a JSON {type(doc).__name__}, not a data row object")
  return doc


def read_range(fileobj, start: int, end: int, limit: Optional[int] = None
               ) -> Iterator[Tuple[int, Union[bytes, InputError]]]:
  """(n, line) for the n-th line (from 1) that starts in [start, end) of a file opened in
  binary: its bytes without the line break (nor the file's BOM), or InputError 'too_large' for
  a line over `limit` (MAX_LINE_BYTES) bytes, read past. A line that starts before `start`
  belongs to the range before. Memory: one line."""
  limit = MAX_LINE_BYTES if limit is None else limit
  # read whole: the line, a BOM before the file's first and \r\n (a longer one is too large)
  for number, raw in lines.read_lines(fileobj, start, end, limit + len(BOM) + 2):
    if raw is not None and start == 0 and number == 1 and raw.startswith(BOM):
      raw = raw[len(BOM):]
    line = None if raw is None else raw.rstrip(b"\r\n")
    if line is None or len(line) > limit:
      yield number, InputError("parse", "too_large", f"the line is longer than {limit} bytes, "
                               "the most a data row may have")
      continue
    yield number, line

"""A CSV's records as rows ({field: value}): a whole file (read_rows), or a big file's header
(read_header) and then any byte range of it (read_range), every line a record of its own.
Pure and Beam-free: the callers open the file.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, NamedTuple, Optional, Tuple, Union

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.csv.columns import LISTING, WRONG_WIDTH, header_columns
from beam_tfrecord.storage import lines

# The longest line a CSV may have (TF-OD rows are under 200 characters): a file without line
# breaks would otherwise be read whole into one string, and split into as many fields.
MAX_LINE_CHARS = 1 << 20
# A line of MAX_LINE_CHARS characters takes at most this many bytes in UTF-8 (with its \r\n).
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS + 2


def _bounded_lines(text, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
  """The lines of `text`, each read at most `limit` + 1 characters at a time; InputError
  'too_large' for a longer one."""
  number = 0
  while True:
    line = text.readline(limit + 1)
    if not line:
      return
    number += 1
    if len(line) > limit and line[-1] not in "\r\n":
      raise InputError("parse", "too_large", f"line {number} is longer than {limit} characters:"
                       " not a CSV of annotations")
    yield line


def read_rows(fileobj, column_map: Mapping[str, str]) -> Iterator[Tuple[int, Dict[str, Any]]]:
  """(line number, {field: value}) for every data row, streaming.

  Python's csv module rather than pandas: pandas parses in chunks and one malformed row fails
  the whole chunk, while here a row with too many or too few fields is handed on marked
  (parse_row then rejects just that row). Raises InputError for a missing column, an empty or
  undecodable file, or a syntax error (rows before it have been yielded).
  """
  import csv
  import io
  text = io.TextIOWrapper(fileobj, encoding="utf-8-sig", newline="")
  reader = csv.reader(_bounded_lines(text), skipinitialspace=True, strict=True)  # strict: an
  # open quote at the end of the file is an error, not one huge field (and a field is at most
  # csv.field_size_limit(), 128 kB unless raised)
  try:
    header = next(reader, None)
    if not header:
      raise InputError("parse", "malformed_csv", "the CSV file is empty")
    index, listing = header_columns(header, column_map)
    for values in reader:
      if not values or (len(values) == 1 and not values[0].strip()):
        continue  # blank line
      row: Dict[str, Any] = {f: values[i] if i < len(values) else None for f, i in index.items()}
      if len(values) != len(header):
        row[WRONG_WIDTH] = (len(values), len(header))
      if listing:
        row[LISTING] = True
      yield reader.line_num, row
  except (csv.Error, UnicodeDecodeError) as e:
    raise InputError("parse", "malformed_csv",
                     f"line {reader.line_num}: {type(e).__name__}: {e}") from None
  finally:
    text.detach()  # leave the underlying file to its owner


# --- big files: a header, then byte ranges read line by line ---


class CsvHeader(NamedTuple):
  """What a worker needs to read a range of a big CSV: the header's columns and where the
  rows start. Small (one entry per mapped column) whatever the file's size."""
  index: Tuple[Tuple[str, int], ...]  # (field, column index) of each mapped column present
  columns: int                        # fields in the header
  listing: bool                       # no box column: a classification listing
  end: int                            # byte offset of the first data line
  lines: int                          # physical lines the header takes (1 unless quoted)


def _too_large(number: Optional[int] = None) -> InputError:
  """`number`: the file's line number, when known (a range knows only its own count)."""
  line = "line" if number is None else f"line {number}"
  return InputError("parse", "too_large", f"{line} is longer than {MAX_LINE_CHARS} "
                    "characters: not a CSV of annotations")


def _is_too_long(raw: bytes, text: Optional[str] = None) -> bool:
  """The line (read with readline(MAX_LINE_BYTES + 1)) has more than MAX_LINE_CHARS characters
  before its line break: as _bounded_lines judges a line read as text."""
  if len(raw) > MAX_LINE_BYTES and raw[-1:] != b"\n":
    return True
  if len(raw) <= MAX_LINE_CHARS:
    return False  # the common case: no decoding needed to know
  text = raw.decode("utf-8", "replace") if text is None else text
  return len(text.rstrip("\r\n")) > MAX_LINE_CHARS


def read_header(fileobj, column_map: Mapping[str, str]) -> CsvHeader:
  """The header record of a CSV opened in binary at its start (reads that record only, at
  most a few MB); InputError as read_rows gives for the same header (empty, undecodable,
  missing_column, too_large, malformed_csv)."""
  import csv
  taken = [0, 0]  # bytes, lines

  def header_lines():
    while True:
      raw = fileobj.readline(MAX_LINE_BYTES + 1)
      if not raw:
        return
      taken[0] += len(raw)
      taken[1] += 1
      text = raw.decode("utf-8-sig" if taken[1] == 1 else "utf-8")
      if _is_too_long(raw, text):
        raise _too_large(taken[1])
      yield text

  reader = csv.reader(header_lines(), skipinitialspace=True, strict=True)
  try:
    header = next(reader, None)
  except (csv.Error, UnicodeDecodeError) as e:
    raise InputError("parse", "malformed_csv",
                     f"line {reader.line_num}: {type(e).__name__}: {e}") from None
  if not header:
    raise InputError("parse", "malformed_csv", "the CSV file is empty")
  index, listing = header_columns(header, column_map)
  return CsvHeader(tuple(index.items()), len(header), listing, taken[0], taken[1])


class _OneLine:
  """Hands a csv.reader one line at a time: a record cannot run on into the next line (the
  reader raises 'unexpected end of data' instead)."""
  __slots__ = ("line",)

  def __init__(self) -> None:
    self.line: Optional[str] = None

  def __iter__(self) -> "_OneLine":
    return self

  def __next__(self) -> str:
    line, self.line = self.line, None
    if line is None:
      raise StopIteration
    return line


QUOTED_BREAK = ("line has an odd number of quote characters: a quoted field holding a line "
                "break (or a stray quote). A big CSV is read in parallel, line by line, where a "
                "line break inside quotes cannot be read: remove such line breaks")


def read_range(fileobj, header: CsvHeader, start: int, end: int
               ) -> Iterator[Tuple[int, Union[Dict[str, Any], InputError, None]]]:
  """(n, row) for the n-th line (from 1) that starts in [start, end) of a CSV opened in binary
  whose header is `header` (start >= header.end): the row as read_rows gives it, None for a
  blank line, or the InputError of that line alone (malformed_row: undecodable, a csv syntax
  error, an odd number of quotes; too_large). Every line is one record, so the rows do not
  depend on where the ranges are cut (storage.lines.read_lines). Memory: one line (at most
  MAX_LINE_BYTES)."""
  import csv
  items = tuple(dict(header.index).items())
  columns, listing = header.columns, header.listing
  feed = _OneLine()
  reader = csv.reader(feed, skipinitialspace=True, strict=True)
  for number, raw in lines.read_lines(fileobj, start, end, MAX_LINE_BYTES + 1, header.end):
    if raw is None or (len(raw) > MAX_LINE_CHARS and _is_too_long(raw)):
      yield number, _too_large()
      continue
    try:
      text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      yield number, InputError("parse", "malformed_row", f"line is not UTF-8: {e}")
      continue
    if '"' in text and text.count('"') & 1:
      yield number, InputError("parse", "malformed_row", QUOTED_BREAK)
      continue
    feed.line = text
    try:
      values = next(reader)
    except csv.Error as e:
      yield number, InputError("parse", "malformed_row", f"{type(e).__name__}: {e}")
      continue
    if not values or (len(values) == 1 and not values[0].strip()):
      yield number, None  # blank line
      continue
    width = len(values)
    if width >= columns:
      row: Dict[str, Any] = {f: values[i] for f, i in items}
    else:
      row = {f: values[i] if i < width else None for f, i in items}
    if width != columns:
      row[WRONG_WIDTH] = (width, columns)
    if listing:
      row[LISTING] = True
    yield number, row


def csv_rows(fileobj, header: Optional[CsvHeader], start: int, end: int,
             column_map: Mapping[str, str]):
  """The rows of a whole file (header None: read_rows, numbered by file line) or of a range of
  a big one (read_range, numbered from the range's first line)."""
  if header is None:
    return read_rows(fileobj, column_map)
  return read_range(fileobj, header, start, end)


def file_rows(fileobj, size: Optional[int], split_bytes: int, column_map: Mapping[str, str]
              ) -> Iterator[Tuple[int, Union[Dict[str, Any], InputError, None]]]:
  """(file line, row) of a whole file as its parts are read: a file over `split_bytes` after
  its header, line by line (read_range), so that the in-process join gives the distributed
  path's rows; a smaller one by read_rows."""
  if size is None or size <= split_bytes:
    yield from read_rows(fileobj, column_map)
    return
  header = read_header(fileobj, column_map)
  for n, row in read_range(fileobj, header, header.end, size):
    yield n + header.lines, row

"""storage/lines.py: the byte-range line reader of the line-based sources (csv, Open Images,
Labelbox, keras-yolo3): every line read once, by the range it starts in, wherever the file is
cut; lines over the budget read past; Beam's cut of a file; line numbers from range counts."""
from __future__ import annotations

import io

from apache_beam.io.restriction_trackers import OffsetRange

from beam_tfrecord.records.model import ErrorRecord, InputError
from beam_tfrecord.storage import lines


def _cut(data: bytes, bounds, limit: int, first: int = 0):
  """(file line, line) of every range [bounds[i], bounds[i + 1]), numbered as line_offsets
  numbers them."""
  out, before = [], 0
  for start, end in zip(bounds, bounds[1:]):
    last = 0
    for n, line in lines.read_lines(io.BytesIO(data), start, end, limit, first):
      last = n
      out.append((before + n, line))
    before += last
  return out


def test_read_lines_every_line_once_wherever_the_file_is_cut():
  data = b"head\r\na,1\n\nb,2\r\n" + b"x" * 40 + b"\nc,3\n" + b"y" * 9 + b"\nlast"
  whole = _cut(data, [0, len(data)], limit=10)
  assert whole == [(1, b"head\r\n"), (2, b"a,1\n"), (3, b"\n"), (4, b"b,2\r\n"), (5, None),
                   (6, b"c,3\n"), (7, b"y" * 9 + b"\n"), (8, b"last")]
  for first in range(len(data) + 1):
    assert _cut(data, [0, first, len(data)], limit=10) == whole, first
    for second in range(first, len(data) + 1, 3):
      assert _cut(data, [0, first, second, len(data)], limit=10) == whole, (first, second)


def test_read_lines_after_a_header_and_at_the_limit():
  data = b"h1,h2\nab\ncd\n"
  assert _cut(data, [6, 8, len(data)], limit=10, first=6) == [(1, b"ab\n"), (2, b"cd\n")]
  # a line is over when its first `limit` bytes hold no line break, at the end of a file too
  assert list(lines.read_lines(io.BytesIO(b"abc\nabcd"), 0, 8, 4)) == [(1, b"abc\n"), (2, None)]
  assert list(lines.read_lines(io.BytesIO(b"abcd\nx"), 0, 6, 4)) == [(1, None), (2, b"x")]


def test_seek_line_goes_to_the_first_line_starting_in_the_range():
  data = b"ab\ncd\nef"
  for start, want in ((0, 0), (1, 3), (3, 3), (4, 6), (8, 8)):
    f = io.BytesIO(data)
    assert lines.seek_line(f, start, len(data)) == want, start
    assert f.tell() == want
  assert lines.seek_line(io.BytesIO(data), 2, 3, first=4) == 2  # before the first line


def test_ranges_cut_as_beams_offset_range():
  for end in (0, 1, 99, 100, 101, 124, 125, 126, 1000, 1024):
    for start in (s for s in (0, 7) if s <= end):
      for step in (1, 3, 100):
        want = [(r.start, r.stop) for r in OffsetRange(start, end).split(step)]
        assert lines.ranges(end, step, start) == want, (end, step, start)


def test_line_offsets_count_the_lines_of_the_ranges_before():
  counts = [("b.csv", (500, 7, 1)), ("a.csv", (900, 3, 2)), ("a.csv", (40, 10, 2)),
            ("a.csv", (400, 5, 2))]
  assert lines.line_offsets(counts) == {
      ("a.csv", 40): 2, ("a.csv", 400): 12, ("a.csv", 900): 17, ("b.csv", 500): 1}
  assert lines.line_offsets([]) == {}
  record = ErrorRecord(source="a.csv", stage="parse", reason="r", message="m", key="k")
  assert lines.with_line(("a.csv", 400, 3, record), {("a.csv", 400): 12}).source == "a.csv:15"


def test_file_size_and_file_error(tmp_path):
  path = tmp_path / "f.txt"
  path.write_bytes(b"12345")
  assert lines.file_size(str(path)) == 5
  assert lines.file_size(str(tmp_path / "gone")) is None
  error = lines.file_error("f", OSError("no"))
  assert (error.reason, error.level, error.message) == ("unreadable", "file", "no")
  error = lines.file_error("f", InputError("parse", "too_large", "big"))
  assert (error.reason, error.level, error.key) == ("too_large", "file", "f")

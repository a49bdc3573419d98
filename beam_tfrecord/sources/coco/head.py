"""What the launcher reads of a COCO file: at most its head (LAUNCH_HEAD_BYTES), for the
pre-run check (check_input) and --format auto (top_keys). Beam-free at import (remote paths
reach Beam's FileSystems inside the functions)."""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from beam_tfrecord.errors import UsageError
from beam_tfrecord.sources.coco.stream import MAX_DEPTH

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
  from beam_tfrecord.storage.files import open_read
  with open_read(uri) as f:  # local files without Beam: an unchanged --append imports none
    yield _Head(f, LAUNCH_HEAD_BYTES if limit is None else limit)


def top_keys(uri: str, limit: int = 1_000_000) -> set:
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

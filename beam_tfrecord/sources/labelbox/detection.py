"""Which NDJSON an --input means, what the head of an export holds, and --format auto. The
launcher reads at most HEAD_BYTES of an export. Beam-free."""
from __future__ import annotations

import io
from typing import List, Optional, Tuple

from beam_tfrecord.storage import paths

# The launcher reads at most this much of an export (check, detect): the first data row.
HEAD_BYTES = 4 << 20
EXTENSIONS = (".ndjson", ".jsonl", ".json")


def _candidate_files(folder: str) -> List[str]:
  from beam_tfrecord.sources.base import is_hidden  # (sources.base imports Beam)
  from beam_tfrecord.storage.files import list_dir
  return sorted(name for name in list_dir(folder)[1]
                if name.lower().endswith((".ndjson", ".jsonl")) and not is_hidden(name))


def export_file(uri: str) -> str:
  """The NDJSON an input names: the file itself, or the one .ndjson/.jsonl file in a folder
  (UsageError when it holds none or several)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.storage.files import is_dir
  if not is_dir(uri):
    return uri
  found = _candidate_files(uri)
  if len(found) != 1:
    raise UsageError(f"--input {uri} is a folder holding {len(found) or 'no'} .ndjson files"
                     + (f" ({', '.join(found[:4])})" if found else "")
                     + ": give the Labelbox export file itself")
  return paths.join(uri, found[0])


def head_keys(uri: str, limit: int = HEAD_BYTES) -> Tuple[str, set]:
  """(kind, top-level keys) of the first JSON value of a file, reading at most `limit` bytes:
  kind 'object', 'array' or '' (not JSON); keys of an object (of an array's first object),
  streaming, up to where the head ends."""
  import ijson

  from beam_tfrecord.storage.files import open_read
  kind, keys, depth = "", set(), 0
  with open_read(uri) as f:
    data = f.read(limit)
  data = data.lstrip(b"\xef\xbb\xbf")
  try:
    events = ijson.basic_parse(io.BytesIO(data), multiple_values=True)
    for n, (event, value) in enumerate(events):
      if n == 0:
        kind = {"start_map": "object", "start_array": "array"}.get(event, "")
        if not kind:
          break
      if event in ("start_map", "start_array"):
        depth += 1
      elif event in ("end_map", "end_array"):
        depth -= 1
        if depth == 0 or (kind == "array" and depth == 1):
          break
      elif event == "map_key" and depth == (1 if kind == "object" else 2):
        keys.add(value)
        if {"data_row", "projects"} <= keys or value in ("images", "annotations"):
          break  # enough to tell (a COCO file's first value is all of it)
  except Exception:  # not JSON, or the head ends inside the first value
    pass
  return kind, keys


def _is_export(uri: str) -> bool:
  kind, keys = head_keys(uri)
  return kind == "object" and {"data_row", "projects"} <= keys


def detect(path: str) -> Optional[str]:
  """--format auto: an .ndjson/.jsonl/.json file whose first data row has `data_row` and
  `projects`, or a folder holding exactly one such .ndjson/.jsonl file."""
  from beam_tfrecord.storage.files import is_dir
  if is_dir(path):
    found = _candidate_files(path)
    if len(found) == 1 and _is_export(paths.join(path, found[0])):
      return f"Labelbox export v2 {found[0]}"
    return None
  if path.lower().endswith(EXTENSIONS) and _is_export(path):
    return "Labelbox export v2 NDJSON"
  return None

"""The one nesting guard of every source that parses a tree (JSON or XML).

COCO, LabelMe and CVAT nest at most 5 or 6 levels and Labelbox about 10. A file that nests far
deeper is hostile or broken, and costs the parsers: ijson's memory grows with the square of
the depth (30 kB of '[' took 2.2 GB) and Python's json recurses. Each format names its limit;
the check and the message are the same everywhere. Pure and Beam-free.
"""
from __future__ import annotations

from typing import Any

from beam_tfrecord.records.model import InputError

MAX_DEPTH = 32


def too_deep(limit: int, what: str = "JSON", unit: str = "levels") -> InputError:
  """The error of an input nesting deeper than `limit` (reason `too_deep`, stage parse)."""
  return InputError("parse", "too_deep", f"the {what} nests deeper than {limit} {unit}")


def nests_deeper(value: Any, limit: int) -> bool:
  """Whether a parsed JSON value nests more than `limit` containers (itself counted as 1).
  Iterative: a value deep enough to matter would overflow a recursive walk."""
  todo = [(value, 1)] if isinstance(value, (dict, list)) else []
  while todo:
    item, depth = todo.pop()
    if depth > limit:
      return True
    for child in (item.values() if isinstance(item, dict) else item):
      if isinstance(child, (dict, list)):
        todo.append((child, depth + 1))
  return False


def check(value: Any, limit: int = MAX_DEPTH) -> Any:
  """The value itself, or InputError too_deep when it nests more than `limit` containers."""
  if nests_deeper(value, limit):
    raise too_deep(limit)
  return value


def loads(data: bytes, limit: int = MAX_DEPTH) -> Any:
  """One JSON document (UTF-8, a BOM allowed) parsed whole and checked: InputError
  `malformed_json` (not JSON, not UTF-8) or `too_deep`."""
  import json
  try:
    value = json.loads(data.decode("utf-8-sig"))
  except RecursionError:  # json's recursion gives up before our walk could
    raise too_deep(limit) from None
  except (UnicodeDecodeError, ValueError) as e:
    raise InputError("parse", "malformed_json", f"{type(e).__name__}: {e}") from None
  return check(value, limit)

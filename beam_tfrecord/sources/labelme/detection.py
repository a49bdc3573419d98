"""--format auto: a folder whose first JSONs have LabelMe heads (the launcher reads a few
heads only). Beam-free."""
from __future__ import annotations

from typing import List, Optional, Tuple

from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import list_dir, open_read

# --format auto: how much of a JSON's head, and how many JSONs, the launcher reads.
DETECT_HEAD_BYTES = 64 << 10
DETECT_FILES = 8
DETECT_FOLDERS = 64  # folders listed per level


def head_keys(head: bytes) -> Tuple[List[str], List[str]]:
  """(top-level keys, keys of the first element of `shapes`) found in the first bytes of a
  JSON (the rest may be cut off)."""
  import ijson
  top: List[str] = []
  first_shape: List[str] = []
  depth, in_shapes, shape_index = 0, False, -1
  try:
    for n, (event, value) in enumerate(ijson.basic_parse(head)):
      if n == 0 and event != "start_map":
        break
      if event in ("start_map", "start_array"):
        depth += 1
        if in_shapes and depth == 3:
          shape_index += 1
      elif event in ("end_map", "end_array"):
        depth -= 1
        if depth == 1:
          in_shapes = False
      elif event == "map_key" and depth == 1:
        top.append(value)
        in_shapes = value == "shapes"
      elif event == "map_key" and in_shapes and depth == 3 and shape_index == 0:
        first_shape.append(value)
  except Exception:  # cut off, or not JSON: what was seen so far
    pass
  return top, first_shape


def is_labelme_head(head: bytes) -> bool:
  """A LabelMe file's head: top-level `shapes`, and `imagePath` at the top or, when the
  shapes run past the head, a first shape with `label` and `points` (COCO has no `shapes`)."""
  top, first_shape = head_keys(head)
  if "shapes" not in top:
    return False
  return "imagePath" in top or {"label", "points"} <= set(first_shape)


def _read_head(uri: str) -> bytes:
  with open_read(uri) as f:
    return f.read(DETECT_HEAD_BYTES)


def detect(path: str) -> Optional[str]:
  """--format auto: a folder with LabelMe JSONs in it or at most 2 levels below (the first
  DETECT_FILES .json files by level and name, heads only)."""
  found: List[str] = []
  level = [path]
  for _ in range(3):  # the folder, then 2 levels below
    below = []
    for folder in level[:DETECT_FOLDERS]:
      subdirs, names = list_dir(folder)
      found += [paths.join(folder, n) for n in names
                if n.lower().endswith(".json") and not n.startswith(".")]
      below += [paths.join(folder, d) for d in subdirs if not d.startswith(".")]
    if len(found) >= DETECT_FILES or not below:
      break
    level = below
  for uri in found[:DETECT_FILES]:
    try:
      if is_labelme_head(_read_head(uri)):
        return "LabelMe JSONs"
    except Exception:  # unreadable: not evidence either way
      continue
  return None

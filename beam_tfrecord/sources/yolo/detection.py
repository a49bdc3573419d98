"""What makes an --input a YOLO dataset (--format auto), and the pre-run check: its dataset
yaml or obj.data parses and names existing folders. Beam-free."""
from __future__ import annotations

import posixpath
from typing import Optional

from beam_tfrecord.sources.yolo.dataset import detect_file, load
from beam_tfrecord.storage import paths


def detect(path: str) -> Optional[str]:
  """--format auto: what makes `path` a YOLO dataset, else None."""
  name = posixpath.basename(path.replace("\\", "/").rstrip("/"))
  if name.endswith((".yaml", ".yml")):
    return name
  if name.endswith(".data"):
    return f"{name}, Darknet"
  found = detect_file(path)
  if found:
    base = posixpath.basename(found.replace("\\", "/"))
    return base if not base.endswith(".data") else f"{base}, Darknet"
  return None


def check(config) -> None:
  """The yaml / obj.data parses and names existing folders."""
  for item in config.inputs:
    split, uri = paths.parse_assignment(item)
    load(uri, split)

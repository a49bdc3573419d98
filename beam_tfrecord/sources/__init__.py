"""Annotation sources, one module per format.

Each module holds pure parse functions (testable without Beam) and one PTransform that turns a
pipeline root into `SourceOutput(images, errors, categories)`:
  images:      PCollection[ImageAnnotation] with split (if the source has one), objects grouped
  errors:      PCollection[ErrorRecord] for every record that could not be used
  categories:  PCollection[(name, id)] when the format carries ids (COCO) or an ordered class
               list (YOLO names, class folders), else None
A module may also offer `detect(path) -> Optional[str]` for --format auto (see detect.py).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import apache_beam as beam


class SourceOutput(NamedTuple):
  images: beam.PCollection
  errors: beam.PCollection
  categories: Optional[beam.PCollection] = None


def read_text(uri: str) -> bytes:
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    return f.read()


def image_extensions() -> frozenset:
  """File extensions (lower case, with the dot) of every format Pillow opens."""
  from PIL import Image
  return frozenset(ext.lower() for ext in Image.registered_extensions())


def is_hidden(relative: str) -> bool:
  """A file or a folder on its way starting with '.' (.DS_Store, .ipynb_checkpoints/...)."""
  return any(part.startswith(".") for part in relative.replace("\\", "/").split("/"))


def list_tree(root: str) -> List[str]:
  """Every file under `root`, recursively, as paths relative to it (posix '/'), sorted.
  Local trees through os.walk; gs:// and s3:// through Beam's FileSystems.match."""
  import os
  from beam_tfrecord import paths
  if not paths.is_remote(root):
    found = []
    for folder, dirs, files in os.walk(root):
      dirs.sort()
      rel = os.path.relpath(folder, root)
      for name in files:
        found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(found)
  from apache_beam.io.filesystems import FileSystems
  prefix = root.rstrip("/") + "/"
  try:
    metas = FileSystems.match([paths.glob_escape(prefix) + "**"])[0].metadata_list
  except Exception:  # nothing there
    return []
  return sorted(m.path[len(prefix):] for m in metas if m.path.startswith(prefix))


def list_dir(root: str) -> Tuple[List[str], List[str]]:
  """(sub-directory names, file names) directly under a directory, sorted; ([], []) when it is
  not a directory."""
  import os
  from beam_tfrecord import paths
  if not paths.is_remote(root):
    try:
      entries = sorted(os.listdir(root))
    except OSError:
      return [], []
    dirs = [e for e in entries if os.path.isdir(os.path.join(root, e))]
    return dirs, [e for e in entries if e not in dirs]
  dirs, files = set(), set()
  for rel in list_tree(root):
    head, sep, _ = rel.partition("/")
    (dirs if sep else files).add(head)
  return sorted(dirs), sorted(files)


def exists(uri: str) -> bool:
  import os
  from beam_tfrecord import paths
  if not paths.is_remote(uri):
    return os.path.exists(uri)
  from apache_beam.io.filesystems import FileSystems
  try:
    return FileSystems.exists(uri)
  except Exception:
    return False


def is_dir(uri: str) -> bool:
  import os
  from beam_tfrecord import paths
  if not paths.is_remote(uri):
    return os.path.isdir(uri)
  return bool(list_dir(uri)[0] or list_dir(uri)[1])


def parent(uri: str) -> str:
  import os
  from beam_tfrecord import paths
  if paths.is_remote(uri):
    return uri.rstrip("/").rsplit("/", 1)[0]
  return os.path.dirname(os.path.normpath(uri)) or "."

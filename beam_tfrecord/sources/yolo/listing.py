"""A YOLO dataset's images listed and paired with their label files, on workers.

The label file of an image is found the Ultralytics way (labels.label_path): the last `images`
component of its path becomes `labels` and the extension `.txt`; without an `images` component
it lies beside the image (Darknet). An image without a label file is a background image; a
label file no image claims is an orphan_label. Each lister yields (output, value) pairs:
'images' (split, image name relative to the root, its label path, label exists), 'labels'
(a label file found, for the orphan check) and 'errors' (ErrorRecords). Beam-free.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Iterator, List, Sequence, Tuple

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.sources.base import is_hidden
from beam_tfrecord.sources.yolo.dataset import (YoloDataset, first_existing,
                                                join_path)
from beam_tfrecord.sources.yolo.labels import (is_label_file, label_dir,
                                               label_path)
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import exists, list_dir, list_tree, parent, read_text

# A list file holds one path per image (~100 bytes; 512 MB is ~5M images, read by one
# worker); a larger one is 'too_large'.
MAX_LIST_BYTES = 512 << 20


def _relative(root: str, uri: str) -> str:
  if paths.is_remote(uri):
    return uri[len(root.rstrip("/")) + 1:] if uri.startswith(root.rstrip("/") + "/") else uri
  return os.path.relpath(uri, root).replace(os.sep, "/")


def list_directory(split: str, entry: str, root: str,
                   extensions: frozenset) -> Iterator[Tuple[str, object]]:
  """The images of a directory entry (recursively), then the label files of its label
  directory (recursively)."""
  images = [paths.join(entry, rel) for rel in list_tree(entry)
            if posixpath.splitext(rel)[1].lower() in extensions and not is_hidden(rel)]
  labels_in = label_dir(entry)
  found = set()
  for rel in list_tree(labels_in) if exists(labels_in) else []:
    if is_label_file(rel):
      found.add(paths.join(labels_in, rel).replace("\\", "/"))
  for uri in images:
    label = label_path(uri)
    yield "images", (split, _relative(root, uri), label, label in found)
  for label in sorted(found):
    yield "labels", label


def list_file(split: str, entry: str, dataset: YoloDataset) -> Iterator[Tuple[str, object]]:
  """The images a .txt list names, each looked for beside the list, under the root and under
  the dataset's bases; a line found nowhere is a missing_image."""
  root = dataset.root
  try:
    text = read_text(entry, MAX_LIST_BYTES).decode("utf-8-sig")
  except Exception as e:
    yield "errors", ErrorRecord(source=entry, stage="read", reason="unreadable", level="file",
                                message=f"{type(e).__name__}: {e}")
    return
  bases = [parent(entry), root, *dataset.bases]
  inside = [b for b in dict.fromkeys(bases) if paths.under(b, root)]
  relocated = []
  for number, line in enumerate(text.splitlines(), start=1):
    name = line.strip()
    if not name or name.startswith("#"):
      continue
    foreign = not paths.is_remote(name) and is_absolute(name)
    candidates = [name] if paths.is_remote(name) or foreign else [
        join_path(b, name[2:] if name.startswith("./") else name) for b in bases]
    uri = first_existing(candidates)
    if uri is None and foreign:
      # written on another machine (Colab: /content/drive/...): the same file by its
      # trailing components, only inside the dataset root
      uri = first_existing(trailing_candidates(name, inside))
      if uri is not None:
        relocated.append((name, uri))
    if uri is None:
      message = (f"{name} is an absolute path that does not exist here (written on another "
                 f"machine?), and no file under {root} ends with its trailing components"
                 if foreign else f"{name} exists under none of {sorted(set(bases))}")
      yield "errors", ErrorRecord(source=f"{entry}:{number}", stage="locate",
                                  reason="missing_image", key=name, message=message)
      continue
    label = label_path(uri)
    yield "images", (split, _relative(root, uri), label, exists(label))
  if relocated:
    name, uri = relocated[0]
    yield "errors", ErrorRecord(
        source=entry, stage="locate", reason="relocated_image", level="warning",
        message=f"{len(relocated)} absolute path(s) of this list do not exist here; each was "
        f"found under {root} by its trailing components (e.g. {name} -> {uri})")


def is_absolute(name: str) -> bool:
  """A POSIX or a Windows absolute path (C:\\data\\obj\\1.jpg, as a Windows user's list says)."""
  return os.path.isabs(name) or bool(re.match(r"^[A-Za-z]:[\\/]", name))


def trailing_candidates(name: str, bases: Sequence[str]) -> List[str]:
  """Where an absolute path from another machine may lie in this copy: its trailing
  components (longest first, at least the file name) under each base. '..' and '.' parts
  are dropped, so a candidate never leaves its base."""
  parts = [p for p in re.split(r"[\\/]", name) if p and p not in (".", "..")]
  if parts and re.fullmatch(r"[A-Za-z]:", parts[0]):
    parts = parts[1:]
  return [join_path(base, "/".join(parts[i:])) for i in range(len(parts)) for base in bases]


def label_files_in(folder: str, lists: frozenset) -> List[str]:
  """Label files directly in a folder of a listed image's label (Darknet: beside it)."""
  return [paths.join(folder, name) for name in list_dir(folder)[1]
          if is_label_file(name) and paths.join(folder, name) not in lists]


def orphans(element) -> Iterator[ErrorRecord]:
  """(label path, {'image': [...], 'file': [...]}) -> an error when no image claims it."""
  label, grouped = element
  if grouped["file"] and not grouped["image"]:
    # its image is missing (as missing_image): image level, not a file's loss
    yield ErrorRecord(source=label, stage="parse", reason="orphan_label", level="image",
                      message="label file without an image: no image of the dataset has "
                      "this label path")

"""--format auto: decide the format from the input path, before the pipeline is built.

Each source module says whether it recognises a path (`detect(path) -> reason or None`). A
directory whose split folders (train/, valid/, test/ ...) each hold one format's files, the
layout of a Roboflow export, becomes that format with one split per folder, named as the
folders are. Two fitting formats, or none, is a UsageError that says what was found and which
--format to give.
"""
from __future__ import annotations

import dataclasses
import posixpath
from typing import List, Optional, Sequence, Tuple

from beam_tfrecord.errors import UsageError
from beam_tfrecord.sources import registry
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import exists, is_dir, list_dir

EXPORT_SPLITS = ("train", "valid", "val", "validation", "test")


def _split_file(fmt: str) -> Optional[str]:
  """The file of a format inside one split folder of an export (COCO, CSV), else None."""
  return getattr(registry.get(fmt), "EXPORT_FILE", None)


@dataclasses.dataclass(frozen=True)
class Detected:
  format: str
  reason: str
  inputs: Tuple[str, ...]

  def line(self) -> str:
    return f"detected: {self.format} ({self.reason})"


def candidates(path: str) -> List[Tuple[str, str]]:
  """(format, reason) of every source that recognises `path`."""
  found = []
  for fmt in registry.FORMATS:  # in the order candidates are listed
    if fmt == "folders" and not is_dir(path):
      continue
    try:
      reason = registry.get(fmt).detect(path)
    except Exception:  # an unreadable file is not that format
      reason = None
    if reason:
      found.append((fmt, reason))
  return found


def _export(path: str) -> Optional[Detected]:
  """A directory of split folders that each hold the same format's files (Roboflow)."""
  subdirs, _ = list_dir(path)
  splits = [d for d in subdirs if d.lower() in EXPORT_SPLITS]
  if not splits:
    return None
  formats = set()
  for split in splits:
    found = [f for f, _ in candidates(paths.join(path, split)) if f != "folders"]
    if len(found) != 1:
      return None
    formats.add(found[0])
  if len(formats) != 1:
    return None
  fmt = formats.pop()
  split_file = _split_file(fmt)
  what = split_file or registry.get(fmt).EXPORT_WHAT
  if split_file:
    inputs = tuple(f"{s}={paths.join(paths.join(path, s), split_file)}" for s in splits)
  else:
    inputs = tuple(f"{s}={paths.join(path, s)}" for s in splits)
  return Detected(fmt, f"split folders {', '.join(splits)} with {what}", inputs)


def _found_summary(path: str) -> str:
  subdirs, files = list_dir(path)
  exts = sorted({posixpath.splitext(f)[1].lower() or f for f in files})
  parts = []
  if subdirs:
    parts.append(f"folders {', '.join(subdirs[:8])}{' ...' if len(subdirs) > 8 else ''}")
  if files:
    parts.append(f"{len(files)} files ({', '.join(exts[:8])})")
  return "; ".join(parts) or "nothing"


def detect_one(path: str) -> Detected:
  if not exists(path) and not is_dir(path):
    raise UsageError(f"--input {path} does not exist")
  direct = candidates(path)
  export = _export(path) if is_dir(path) else None
  if export is not None:
    # the split folders' own format also shows at the top (XMLs in sub-folders); the export
    # reading, one split per folder, is the one meant
    direct = [(f, r) for f, r in direct if f not in (export.format, "folders")]
    if not direct:
      return export
    found = [f"{export.format} ({export.reason})"] + [f"{f} ({r})" for f, r in direct]
  else:
    if len(direct) == 1:
      fmt, reason = direct[0]
      inputs = (path,)
      if _split_file(fmt) and is_dir(path):
        inputs = (paths.join(path, _split_file(fmt)),)
      return Detected(fmt, reason, inputs)
    found = [f"{f} ({r})" for f, r in direct]
  if not found:
    what = _found_summary(path) if is_dir(path) else "a file of no known format"
    raise UsageError(f"cannot tell the format of {path}: found {what}; give --format "
                     + "|".join(registry.FORMATS))
  formats = sorted({f.split(" ", 1)[0] for f in found})
  raise UsageError(f"{path} fits more than one format: {'; '.join(found)}; give --format "
                   f"{' or --format '.join(formats)}")


def detect(inputs: Sequence[str]) -> Detected:
  """The format of all --input values (SPLIT= prefixes kept)."""
  results = []
  for item in inputs:
    split, path = paths.parse_assignment(item)
    found = detect_one(path)
    if split and len(found.inputs) == 1:
      _, only = paths.parse_assignment(found.inputs[0])
      found = dataclasses.replace(found, inputs=(f"{split}={only}",))
    results.append(found)
  formats = sorted({r.format for r in results})
  if len(formats) > 1:
    raise UsageError(f"the inputs are of different formats ({', '.join(formats)}); convert "
                     "them separately or give --format")
  return Detected(formats[0], "; ".join(dict.fromkeys(r.reason for r in results)),
                  tuple(i for r in results for i in r.inputs))

"""Source fingerprint for `convert --if-changed`: has anything the conversion reads changed?

The fingerprint is a SHA-256 over a sorted listing of every file the conversion depends on
(annotation files, the files under each image root, a given label map) as (path, size,
modification time), plus the conversion settings that shape the output and the tool version.
Listing goes through Beam's FileSystems.match, so it works the same for local paths, gs:// and
s3://, and reads no file contents: cheap even for COCO's 118k images.

A finished run records the fingerprint in manifest.json under "source_fingerprint"; the next
`--if-changed` run lists the sources again and skips the conversion when both are equal.
"""
from __future__ import annotations

import hashlib
import json
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from beam_tfrecord.storage import paths

# (path, size in bytes or -1 when missing, modification time in seconds or -1)
Entry = Tuple[str, int, float]

# ConvertConfig fields that do not change what a conversion writes: left out of the fingerprint
# (every other field, present or added later, is in it).
NOT_SETTINGS = ("output", "overwrite", "source_fingerprint", "writer_processes")
VERSION = 1


def _line(entry: Entry) -> str:
  path, size, mtime = entry
  return f"{path}\t{int(size)}\t{float(mtime):.6f}\n"


def settings_of(config) -> Dict:
  """The output-shaping settings of a ConvertConfig (a dataclass), as a plain dict."""
  import dataclasses
  return {k: v for k, v in sorted(dataclasses.asdict(config).items()) if k not in NOT_SETTINGS}


def compute_from_entries(entries: Iterable[Entry], settings: Optional[Dict] = None,
                         tool_version: str = "") -> Dict:
  """Pure: the fingerprint of a listing. Order and duplicates of `entries` do not matter."""
  unique = sorted(set((str(p), int(s), round(float(m), 6)) for p, s, m in entries))
  digest = hashlib.sha256()
  digest.update(f"beam-tfrecord-fingerprint/{VERSION}\n{tool_version}\n".encode())
  digest.update(json.dumps(settings or {}, sort_keys=True, default=str).encode())
  digest.update(b"\n")
  for entry in unique:
    digest.update(_line(entry).encode("utf-8"))
  return {"sha256": digest.hexdigest(), "files": len(unique),
          "bytes": sum(s for _, s, _ in unique if s > 0)}


def same(current: Optional[Dict], recorded: Optional[Dict]) -> bool:
  """True when both fingerprints exist and agree."""
  return bool(current and recorded and current.get("sha256")
              and current.get("sha256") == recorded.get("sha256"))


def source_patterns(config) -> List[Tuple[str, str]]:
  """(kind, glob) of everything the conversion reads. kind 'file' must exist; 'tree' is a listing.

  coco/csv: each annotation file; the image roots (default: each annotation file's directory).
  voc: Annotations/ and ImageSets/Main/ under the VOC directory; the image root (default
  VOC/JPEGImages); a folder of XMLs: everything below it. folders: everything below each
  input. yolo: the dataset yaml / obj.data, the dataset root, each image directory and its
  label directory (or list file). Plus --label-map when given.
  """
  from beam_tfrecord.sources import registry
  result, implied = registry.get(config.format).fingerprint_patterns(config)
  roots = [paths.parse_assignment(item)[1] for item in config.images] + implied
  for root in sorted(set(roots)):
    result.append(("tree", paths.join(root, "**")))
  if config.label_map:
    result.append(("file", config.label_map))
  return result


def list_entries(patterns: Sequence[Tuple[str, str]], exclude: Optional[str] = None
                 ) -> List[Entry]:
  """List files through Beam FileSystems (local, gs://, s3://). Files under `exclude` (the
  output directory, when it sits inside an image root) are left out. A 'file' pattern that
  matches nothing is recorded as missing (size -1), so its later appearance is a change."""
  from apache_beam.io.filesystems import FileSystems
  entries: List[Entry] = []
  for kind, pattern in patterns:
    try:
      found = FileSystems.match([pattern])[0].metadata_list
    except Exception:  # BeamIOError: nothing there (or not reachable: then we convert)
      found = []
    if kind == "file" and not found:
      entries.append((pattern, -1, -1.0))
    for meta in found:
      if paths.under(meta.path, exclude):
        continue
      mtime = meta.last_updated_in_seconds
      entries.append((meta.path, meta.size_in_bytes, float(mtime) if mtime is not None else -1.0))
  return entries


def compute(config) -> Dict:
  """The fingerprint of a ConvertConfig's sources as they are now."""
  import beam_tfrecord
  entries = list_entries(source_patterns(config), exclude=config.output)
  return compute_from_entries(entries, settings_of(config), beam_tfrecord.__version__)


def recorded(output: str) -> Tuple[Optional[Dict], Optional[Dict]]:
  """(manifest, its source_fingerprint) of the last successful run in `output`, else
  (manifest or None, None): no manifest, an unreadable one, or one whose status is not ok."""
  from beam_tfrecord.finalize import output as outputs
  try:
    manifest = outputs.read_manifest(output)
  except Exception:  # no finished run there (or unreadable): convert
    return None, None
  if manifest.get("status", "ok") != "ok":
    return manifest, None
  return manifest, manifest.get("source_fingerprint")

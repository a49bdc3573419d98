"""Source fingerprint for `convert --if-changed`: has anything the conversion reads changed?

The fingerprint covers every file the conversion depends on (annotation files, the files under
each image root, a given label map) as (path, size, modification time), the conversion
settings that shape the output, and the tool version. It reads no file contents.

It is computed on workers (SourceFingerprint, wired by pipeline.build): the launcher lists no
folder. Each pattern (an image root, an annotation file) is listed by one worker, streaming,
into a digest of its own: the sum modulo 2**256 of its entries' SHA-256 values, which needs no
sort and no list of the entries. The pattern digests, one per pattern, are then hashed in
pattern order into the fingerprint. A file matched by two patterns would count twice, so a
pattern inside another tree pattern is left out (prune).

A finished run records the fingerprint in manifest.json under "source_fingerprint"; the next
`--if-changed` run compares on a worker (compare) and, when both are equal, finalize replaces
nothing. Version 2 differed from version 1's single sorted listing; version 3 (this one) adds the
inode and change time of local files. The first run after an upgrade sees a different
fingerprint and converts once.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from beam_tfrecord.storage import paths

# (path, size in bytes or -1 when missing, modification time in seconds or -1)
Entry = Tuple[str, int, float]
# (kind, pattern): kind 'file' is one file (recorded as missing when absent), 'tree' is
# ROOT/** (every file below ROOT)
Pattern = Tuple[str, str]

VERSION = 3
_MODULUS = 1 << 256

# ConvertConfig.source_fingerprint as the CLI sets it for --if-changed: compute the
# fingerprint on workers (pipeline.build); the manifest records the computed one instead.
REQUESTED: Dict[str, Any] = {"compute": "on-workers"}

# The Beam counter finalize increments when it skips an unchanged run: how the launcher
# learns of the skip (the workers' finalize cannot print on the launcher's terminal).
SKIPPED_NAMESPACE, SKIPPED_NAME = "beam_tfrecord", "if_changed_skipped"


def requested(config) -> bool:
  """True when a ConvertConfig asks for the --if-changed comparison (REQUESTED). --append
  passes the fingerprint its launcher computed instead: the manifest records it as it is,
  and the workers do not list the sources a second time (that cost 1.7 CPU-s at 200k
  images, 8% of the first version)."""
  return bool(config.source_fingerprint and config.source_fingerprint.get("compute"))


def _line(entry: Entry) -> str:
  path, size, mtime = entry
  stamp = mtime if isinstance(mtime, str) else f"{float(mtime):.6f}"
  return f"{path}\t{int(size)}\t{stamp}\n"


def settings_of(config) -> Dict:
  """The settings of a ConvertConfig in the fingerprint: every field but those tagged RUNTIME
  (ConvertConfig.fingerprint_settings). --append's base (append_base) is RUNTIME: a version
  made from unchanged sources equals the one before, which the next run must still skip."""
  return dict(sorted(config.fingerprint_settings().items()))


def same(current: Optional[Dict], recorded: Optional[Dict]) -> bool:
  """True when both fingerprints exist and agree."""
  return bool(current and recorded and current.get("sha256")
              and current.get("sha256") == recorded.get("sha256"))


def source_patterns(config) -> List[Pattern]:
  """(kind, glob) of everything the conversion reads. kind 'file' must exist; 'tree' is a listing.

  coco/csv: each annotation file; the image roots (default: each annotation file's directory).
  voc: Annotations/ and ImageSets/Main/ under the VOC directory; the image root (default
  VOC/JPEGImages); a folder of XMLs: everything below it. folders: everything below each
  input. yolo: the dataset yaml / obj.data, the dataset root, each image directory and its
  label directory (or list file). Plus --label-map when given. Reads the YOLO yaml and lists
  a VOC directory's first level: called on a worker (SourceFingerprint).
  """
  from beam_tfrecord.sources import registry
  result, implied = registry.fingerprint_patterns(config)
  roots = [paths.parse_assignment(item)[1] for item in config.images] + implied
  for root in sorted(set(roots)):
    result.append(("tree", paths.join(root, "**")))
  if config.label_map:
    result.append(("file", config.label_map))
  return result


def _target(pattern: Pattern) -> str:
  """The file of a 'file' pattern, the root of a 'tree' pattern (ROOT/**)."""
  kind, glob = pattern
  if kind == "tree" and glob.endswith("**"):
    return glob[:-2].rstrip("/\\") or glob[:-2]
  return glob


def prune(patterns: Iterable[Pattern]) -> List[Pattern]:
  """The patterns, sorted, without duplicates and without those inside a tree pattern's root
  (a YOLO dataset root holds its image and label folders): that tree lists their files, and a
  file listed by two patterns would count twice. Pure, O(patterns**2)."""
  unique = sorted(set(patterns))
  trees = {_target(p) for p in unique if p[0] == "tree"}
  return [p for p in unique
          if not any(paths.under(_target(p), root) and (p[0] == "file" or root != _target(p))
                     for root in trees)]


def _local_stamp(st: os.stat_result) -> str:
  """A local file's stamp: modification time, inode and change time (ns). `cp -p`, `rsync
  -a` and `tar x` keep the modification time of a file they rewrite; nobody sets the change
  time, and a file replaced is a new inode (version 3 of the fingerprint)."""
  return f"{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"


def _walk_local(root: str, follow_symlinks: bool) -> Iterator[Entry]:
  """Files below a local root, streaming: no file name is kept, only the folders still to
  list (os.walk keeps each folder's file names). Symlinked folders are walked with
  follow_symlinks (each real folder once: no loop), as the conversion reads them; a file that
  vanishes while listed is left out."""
  seen = set()
  todo = [root]
  while todo:
    folder = todo.pop()
    if follow_symlinks:
      real = os.path.realpath(folder)
      if real in seen:
        continue
      seen.add(real)
    subdirs = []
    try:
      scan = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
      continue  # no such folder (yet): no files, and its later files are a change
    with scan:
      for item in scan:
        try:
          if item.is_dir():  # follows a symlink: a symlinked folder is a folder
            if follow_symlinks or not item.is_symlink():
              subdirs.append(item.path)
            continue
          st = item.stat()
        except FileNotFoundError:
          continue
        yield item.path, st.st_size, _local_stamp(st)
    todo.extend(sorted(subdirs, reverse=True))  # sorted: the same real folders each run


def _walk_gcs(root: str) -> Iterator[Entry]:
  """Objects below a gs:// prefix, streaming page by page (Beam's match keeps every name)."""
  from beam_tfrecord.storage import gcs
  bucket, _, name = root[len("gs://"):].partition("/")
  prefix = name.rstrip("/") + "/" if name.strip("/") else ""
  for blob in gcs.client().list_blobs(bucket, prefix=prefix):
    if blob.name.endswith("/"):
      continue  # a folder placeholder, not a file
    updated = blob.updated.timestamp() if blob.updated is not None else -1.0
    yield f"gs://{bucket}/{blob.name}", int(blob.size or 0), updated


def list_pattern(pattern: Pattern, exclude: Optional[str] = None,
                 follow_symlinks: bool = False) -> Iterator[Entry]:
  """The entries of one pattern, streaming: local folders walked, gs:// listed page by page,
  other stores (s3://) through Beam's FileSystems.match (which holds the pattern's listing).
  Files under `exclude` (the output directory, when it sits inside an image root) are left
  out. A 'file' pattern that matches nothing is one entry marked missing (size -1), so that
  its later appearance is a change. A folder that cannot be read raises (the run fails)."""
  kind, target = pattern[0], _target(pattern)
  if kind == "file":
    if paths.is_remote(target):
      from apache_beam.io.filesystems import FileSystems
      try:
        found = [(m.path, m.size_in_bytes, m.last_updated_in_seconds)
                 for m in FileSystems.match([target])[0].metadata_list]
      except Exception:  # BeamIOError: no such object
        found = []
    else:
      try:
        st = os.stat(target)
        found = [(target, st.st_size, _local_stamp(st))]
      except (FileNotFoundError, NotADirectoryError):
        found = []
    yield from ((p, int(s), m if isinstance(m, str) else float(m) if m is not None else -1.0)
                for p, s, m in found
                if not paths.under(p, exclude))
    if not found:
      yield target, -1, -1.0
    return
  if not paths.is_remote(target):
    entries: Iterable[Entry] = _walk_local(target, follow_symlinks)
  elif target.startswith("gs://"):
    entries = _walk_gcs(target)
  else:
    from apache_beam.io.filesystems import FileSystems
    try:
      found = FileSystems.match([target.rstrip("/") + "/**"])[0].metadata_list
    except Exception:  # BeamIOError: nothing there
      found = []
    entries = ((m.path, m.size_in_bytes, m.last_updated_in_seconds
                if m.last_updated_in_seconds is not None else -1.0) for m in found)
  for entry in entries:
    if not paths.under(entry[0], exclude):
      yield entry


def digest_entries(entries: Iterable[Entry]) -> Tuple[int, int, str]:
  """(files, bytes, digest) of a listing in one pass, in constant memory: the digest is the
  sum modulo 2**256 of each entry's SHA-256, so the listing's order does not matter (a
  storage listing's order is not fixed) and no entry is kept. Pure."""
  files = size = total = 0
  for entry in entries:
    files += 1
    size += max(int(entry[1]), 0)
    total += int.from_bytes(hashlib.sha256(_line(entry).encode("utf-8")).digest(), "big")
  return files, size, f"{total % _MODULUS:064x}"


def digest_pattern(pattern: Pattern, exclude: Optional[str] = None,
                   follow_symlinks: bool = False) -> Dict:
  """One pattern's digest: {"kind", "pattern", "files", "bytes", "digest"}. Runs on the worker
  that lists the pattern; its size does not depend on how many files the pattern matches."""
  try:
    files, size, digest = digest_entries(list_pattern(pattern, exclude, follow_symlinks))
  except Exception as e:  # unreadable folder, no access: the run fails, nothing replaced
    why = getattr(e, "strerror", None) or f"{type(e).__name__}: {e}"
    raise RuntimeError(f"--if-changed could not list {pattern[1]} ({why})") from e
  return {"kind": pattern[0], "pattern": pattern[1], "files": files, "bytes": size,
          "digest": digest}


def combine(digests: Iterable[Dict], settings: Optional[Dict] = None,
            tool_version: str = "") -> Dict:
  """Pure: the fingerprint of the pattern digests, in pattern order (whatever order they come
  in): {"version", "sha256", "files", "bytes", "patterns"}. O(patterns)."""
  ordered = sorted(digests, key=lambda d: (d["kind"], d["pattern"]))
  digest = hashlib.sha256()
  digest.update(f"beam-tfrecord-fingerprint/{VERSION}\n{tool_version}\n".encode())
  digest.update(json.dumps(settings or {}, sort_keys=True, default=str).encode())
  digest.update(b"\n")
  for d in ordered:
    digest.update(f"{d['kind']}\t{d['pattern']}\t{d['files']}\t{d['bytes']}\t"
                  f"{d['digest']}\n".encode("utf-8"))
  return {"version": VERSION, "sha256": digest.hexdigest(),
          "files": sum(d["files"] for d in ordered), "bytes": sum(d["bytes"] for d in ordered),
          "patterns": len(ordered)}


def patterns_of(config) -> List[Pattern]:
  """The pruned patterns of a ConvertConfig (on a worker: see source_patterns)."""
  return prune(source_patterns(config))


def compute(config) -> Dict:
  """The fingerprint of a ConvertConfig's sources as they are now, in this process: the value
  SourceFingerprint computes on workers. Lists every source: not for the launcher."""
  import beam_tfrecord
  digests = [digest_pattern(p, config.output, config.follow_symlinks)
             for p in patterns_of(config)]
  return combine(digests, settings_of(config), beam_tfrecord.__version__)


def recorded(output: str) -> Tuple[Optional[Manifest], Optional[Dict]]:
  """(manifest, its source_fingerprint) of the last successful run in `output`, else
  (manifest or None, None): no manifest, an unreadable one, or one whose status is not ok."""
  from beam_tfrecord.finalize import output as outputs
  try:
    manifest = outputs.load_manifest(output)
  except Exception:  # no finished run there (or unreadable): convert
    return None, None
  if (manifest.status or "ok") != "ok":
    return manifest, None
  return manifest, manifest.source_fingerprint


def compare(current: Dict, output: str) -> Dict:
  """On a worker: the current fingerprint against the output's last successful run.
  {"current", "recorded", "created" (of that run), "unchanged": bool}."""
  manifest, last = recorded(output)
  return {"current": current, "recorded": last,
          "created": manifest.created or None if manifest else None,
          "unchanged": same(current, last)}


def skipped_line(output: str, created: Optional[str], fingerprint: Dict) -> str:
  """What a skipped run prints (the launcher, once the job has ended)."""
  return (f"beam-tfrecord: skipped, sources unchanged since the run of {created} in {output} "
          f"({fingerprint.get('files')} files, fingerprint "
          f"{str(fingerprint.get('sha256'))[:12]})")


def _patterns_task(_, config) -> List[Pattern]:
  return patterns_of(config)


def _digest_task(pattern: Sequence[str], config) -> Dict:
  return digest_pattern((pattern[0], pattern[1]), config.output, config.follow_symlinks)


@functools.lru_cache(maxsize=1)
def _source_fingerprint_class():
  import apache_beam as beam

  class SourceFingerprint(beam.PTransform):
    """PBegin -> PCollection of one dict: the fingerprint (see combine) of the sources a
    ConvertConfig reads, as compute() would give, computed on workers.

    One worker works out the patterns (source_patterns: the YOLO yaml read, a VOC folder's
    first level listed); they are spread (Reshuffle), each listed by one worker into its
    digest (digest_pattern, streaming); the digests are gathered (O(patterns)) and hashed in
    pattern order. Largest element: the list of pattern digests, ~200 bytes per pattern,
    whatever the number of images. Nothing is listed while the pipeline is built.
    """

    def __init__(self, config, tool_version: Optional[str] = None):
      super().__init__()
      import beam_tfrecord
      self.config = config
      self.tool_version = beam_tfrecord.__version__ if tool_version is None else tool_version

    def expand(self, pbegin):
      return (pbegin
              | "Start" >> beam.Create([None])
              | "Patterns" >> beam.FlatMap(_patterns_task, self.config)
              | "Spread" >> beam.Reshuffle()  # each pattern listed where the runner puts it
              | "List" >> beam.Map(_digest_task, self.config)
              | "Gather" >> beam.combiners.ToList()
              | "Combine" >> beam.Map(combine, settings_of(self.config), self.tool_version))

  SourceFingerprint.__module__ = __name__
  SourceFingerprint.__qualname__ = "SourceFingerprint"
  return SourceFingerprint


def __getattr__(name: str):
  # SourceFingerprint needs Beam; defined on first use so that importing this module does not
  # import Beam (the CLI imports it; tests/test_layout.py)
  if name == "SourceFingerprint":
    return _source_fingerprint_class()
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

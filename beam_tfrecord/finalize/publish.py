"""--append: a version's shard files named, checked and published into a versioned output
(storage/versions.py has the layout), and old versions retired.

Publishing is the commit of a version, as a Delta Lake commit is: the version's directory
appears whole (locally one rename of the run directory; on gs:// the version's manifest is
created with a does-not-exist precondition, which exactly one run wins, before its other
files are copied server side), then LATEST is replaced (a rename; gs://: a generation
precondition on the LATEST read at the start). The output lock (finalize/lock.py) already
keeps two runs apart; the claim makes a run that lost its lock fail rather than publish
twice. A version is never changed afterwards; files it shares with the version before are
hard links, made read-only (a version edited in place would change them all).
"""
from __future__ import annotations

import errno
import json
import os
import stat
from typing import Dict, Iterable, List, Optional, Sequence

from beam_tfrecord.plan import naming
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.records.tfrecord import read_record
from beam_tfrecord.storage import files, paths, record_files, versions
from beam_tfrecord.storage.layout import MANIFEST, OWN_PREFIX, kill_point
from beam_tfrecord.storage import catalog


class LostRace(Exception):
  """Another run published the version number this run meant to publish."""


def name_segments(stats: Sequence[Dict], template: str) -> List[Dict]:
  """The stats of the shards a version keeps (empty segments dropped), renumbered 0..N-1 per
  split in segment order: `path` and `index` the final names, `staged` and `index_staged` the
  names written under where they differ (kept shards are linked under the final names)."""
  out: List[Dict] = [s for s in stats if s.get("shard") is None]
  by_split: Dict[str, List[Dict]] = {}
  for s in sorted((s for s in stats if s.get("shard") is not None and not s.get("empty")),
                  key=lambda s: (s["split"], s["shard"])):
    by_split.setdefault(s["split"], []).append(s)
  for split, items in sorted(by_split.items()):
    n = len(items)
    for k, s in enumerate(items):
      s = dict(s)
      final = naming.format_shard_name(template, split, k, n, s["examples"])
      index = catalog.index_name(split, k, n)
      if not s.get("kept_from"):
        written = s.get("staged") or s["path"]
        s.pop("staged", None)
        if written != final:
          s["staged"] = written
        if s["index"] != index:
          s["index_staged"] = s["index"]
      s["path"], s["index"], s["shard"] = final, index, k
      out.append(s)
  return out


def rename_indexes(run_directory: str, stats: Sequence[Dict]) -> None:
  """Indexes written under their segment's number moved to their final names."""
  from apache_beam.io.filesystems import FileSystems
  moves = [(paths.child(run_directory, s["index_staged"]), paths.child(run_directory, s["index"]))
           for s in stats if s.get("index_staged")]
  if {a for a, _ in moves} & {b for _, b in moves}:
    # a final name that is another index's written name: through unique names first
    tmp = [(a, a + ".renaming") for a, _ in moves]
    FileSystems.rename([a for a, _ in tmp], [b for _, b in tmp])
    moves = [(t, b) for (_, t), (_, b) in zip(tmp, moves)]
  if moves:
    FileSystems.rename([a for a, _ in moves], [b for _, b in moves])


def append_summary(incremental: Dict, stats: Sequence[Dict]) -> Dict:
  """The manifest's `incremental` for an --append version: what it did with the one before."""
  previous = incremental.get("previous")
  shards = [s for s in stats if s.get("shard") is not None]
  images = {k: sum(s.get(k, 0) for s in shards) for k in ("added", "changed", "removed")}
  images["kept"] = sum(s.get("unchanged", 0) for s in shards)
  kept = sum(1 for s in shards if s.get("kept_from"))
  written_deltas = [s for s in shards if s.get("new") and not s.get("kept_from")]
  delta = len(written_deltas)
  largest_delta: Dict[str, int] = {}
  for s in written_deltas:
    largest_delta[s["split"]] = max(largest_delta.get(s["split"], 0),
                                    s["images"] + s["rejected"])
  return {"previous": previous.directory if previous is not None else None,
          "mode": "append", "reason": incremental.get("reason") or "",
          "images": images,
          "shards": {"total": len(shards), "delta_written": delta,
                     "rewritten": len(shards) - kept - delta, "kept": kept},
          "reused_images": sum(s.get("reused", 0) for s in shards),
          "damaged": sum(s.get("damaged", 0) for s in shards),
          # per split: the images of its largest new delta shard (cli/append.oversized_delta)
          "largest_delta": largest_delta}


def nothing_changed(incremental: Optional[Dict]) -> bool:
  if not incremental or incremental.get("mode") != "append":
    return False
  images, shards = incremental["images"], incremental["shards"]
  return (not (images["added"] or images["changed"] or images["removed"]) and
          shards["kept"] == shards["total"] and not incremental.get("damaged"))


def shard_and_index_files(manifest: Manifest) -> List[str]:
  names = [s.path for split in manifest.splits.values() for s in split.shards]
  for entry in (manifest.shard_plan or {}).values():
    names.extend(entry.get("indexes") or [])
  return names


def seal(run_directory: str, stats: Sequence[Dict]) -> Dict[str, str]:
  """A version's shards and indexes made read-only (locally: versions share them as hard
  links, and read-only stops all but root), then each shard's stamp taken
  (catalog.file_stamp), {shard name: stamp}: the manifest records them, and the next
  run keeps a shard unread only while its stamp is the same. Empty on object stores."""
  if paths.is_remote(run_directory):
    return {}
  stamps = {}
  for s in stats:
    if s.get("shard") is None or s.get("empty"):
      continue
    for name in (s["path"], s.get("index"),
                 record_files.index_name(s["path"]) if s.get("index_file") else None):
      if not name:
        continue
      path = paths.child(run_directory, name)
      st = os.lstat(path)
      if stat.S_ISREG(st.st_mode):
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o222)
    stamps[s["path"]] = catalog.file_stamp(paths.child(run_directory, s["path"]))
  return stamps


def tidy(run_directory: str) -> None:
  """The progress counters (storage/progress) removed: a version holds its files only."""
  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.storage import progress
  scratch = [paths.child(run_directory, n) for n in outputs.entries(run_directory)
             if n.startswith((progress.PLANNED, progress.DONE))]
  if scratch:
    FileSystems.delete(scratch)


def check_version(directory: str, manifest: Manifest, kept: Iterable[str] = ()) -> str:
  """'' when the version in `directory` is what its manifest says, else what is wrong.
  Shards it wrote are read whole (framing, CRCs, record counts); shards `kept` (linked or
  copied from the version before, which was checked when it was published) by type and
  size only: reading them would cost what keeping them saves (`verify` reads everything)."""
  kept = set(kept)
  for split, info in manifest.splits.items():
    for shard in info.shards:
      uri = paths.child(directory, shard.path)
      try:
        if paths.is_remote(uri):
          size = paths.size_of(uri)
        else:
          st = os.lstat(uri)
          if not stat.S_ISREG(st.st_mode):
            return f"{shard.path} is not a regular file"
          size = st.st_size
        if size != shard.bytes:
          return f"{shard.path} holds {size} bytes, not {shard.bytes}"
        if shard.path in kept:
          continue
        count = _count_records(uri, record_files.file_format_of(manifest))
        if shard.examples is not None and count != shard.examples:
          return f"{shard.path} holds {count} records, not {shard.examples}"
        if manifest.setting("index_files"):  # written from the offsets: checked as verify does
          index = record_files.index_name(shard.path)
          problem = record_files.check_index(uri, paths.child(directory, index))
          if problem:
            return f"{index}: {problem}"
      except (OSError, ValueError) as e:
        return f"{shard.path}: {e}"
  return ""


def _count_records(uri: str, file_format: str) -> int:
  """The records of a shard read whole (TFRecord CRCs, ArrayRecord hashes; ValueError when
  they fail), opened without following a link."""
  if file_format == record_files.TFRECORD:
    count = 0
    with files.open_earlier(uri) as f:
      while read_record(f) is not None:
        count += 1
    return count
  return sum(1 for _ in record_files.read_records(uri, file_format))  # opened as EarlierShard


def publish(dest: str, run_directory: str, number: int, base: Optional[int],
            run_id: str, manifest_bytes: bytes) -> str:
  """Make the run directory version `number` of `dest` and name it in LATEST. Returns the
  version's directory. LostRace when the number was taken or LATEST moved meanwhile (this
  run's files are then removed, nothing of it published)."""
  target = versions.version_dir(dest, number)
  if paths.is_remote(dest):
    return _publish_gcs(dest, run_directory, target, number, base, manifest_bytes)
  root = paths.join(dest, versions.VERSIONS)
  try:
    os.mkdir(root)
  except FileExistsError:
    if not stat.S_ISDIR(os.lstat(root).st_mode):
      raise LostRace(f"{root} is not a directory of ours (a link or a file)") from None
  if versions.read_latest(dest) != base:  # before anything is published, as on gs://
    raise LostRace("LATEST was moved by another run meanwhile")
  kill_point("publish-version")
  try:
    os.rename(run_directory, target)  # fails on a non-empty target: one run wins
  except OSError as e:
    if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
      raise LostRace(f"version {versions.version_name(number)} was published by another "
                     "run") from None
    raise
  kill_point("publish-latest")
  tmp = paths.join(dest, f"{OWN_PREFIX}LATEST-{run_id}")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
  try:
    os.write(fd, versions.latest_text(number))
    os.fsync(fd)
  finally:
    os.close(fd)
  os.rename(tmp, paths.join(dest, versions.LATEST))
  kill_point("published")
  return target


def _publish_gcs(dest: str, run_directory: str, target: str, number: int,
                 base: Optional[int], manifest_bytes: bytes) -> str:
  from apache_beam.io.filesystems import FileSystems
  from google.api_core import exceptions as gexc

  from beam_tfrecord.storage import gcs
  bucket_name, _, prefix = target[len("gs://"):].partition("/")
  bucket = gcs.client().bucket(bucket_name)
  latest_name = paths.join(dest, versions.LATEST)[len(f"gs://{bucket_name}/"):]
  latest = bucket.get_blob(latest_name)
  if (versions.parse_latest(latest.download_as_bytes()) if latest else None) != base:
    raise LostRace("LATEST was moved by another run meanwhile")
  kill_point("publish-version")
  claimed = LostRace(f"version {versions.version_name(number)} was published by another run")
  if FileSystems.exists(f"{target}/{MANIFEST}"):  # as the lock: the emulator has no preconditions
    raise claimed
  try:  # the claim: exactly one run creates a version's manifest (Cloud Storage applies it
    # atomically)
    bucket.blob(f"{prefix}/{MANIFEST}").upload_from_string(
        manifest_bytes, content_type="application/json", if_generation_match=0)
  except gexc.PreconditionFailed:
    raise claimed from None
  found = [m.path for m in FileSystems.match(
      [paths.glob_escape(run_directory.rstrip("/")) + "/**"])[0].metadata_list]
  src = [u for u in found if not u.endswith("/" + MANIFEST)]
  dst = [target + u[len(run_directory.rstrip("/")):] for u in src]
  if src:
    FileSystems.copy(src, dst)  # same bucket: server-side rewrites, no download
  kill_point("publish-latest")
  try:
    bucket.blob(latest_name).upload_from_string(
        versions.latest_text(number), content_type="text/plain",
        if_generation_match=latest.generation if latest else 0)
  except gexc.PreconditionFailed:
    raise LostRace("LATEST was moved by another run meanwhile") from None
  FileSystems.delete(found)
  return target


def delete_version(dest: str, number: int) -> bool:
  """Delete a version's files (those its manifest lists, and the manifest last); its folder
  too when nothing else is left in it. Another version's hard links keep their data; gs://
  versions hold their own copies. False when it cannot be told what is ours (no readable
  manifest: left as it is)."""
  from beam_tfrecord.finalize import output as outputs
  directory = versions.version_dir(dest, number)
  try:
    manifest = outputs.load_manifest(directory)
    names = set(outputs.files_of(manifest)) | set(shard_and_index_files(manifest))
  except Exception:
    return False
  names.discard(MANIFEST)
  if not paths.is_remote(directory):  # a link or folder put in a listed file's place: not ours
    names = {n for n in names if not outputs.not_a_plain_file(paths.child(directory, n))}
  # one unlink per checked file (Beam's delete would read a listed `*` as a glob)
  outputs.delete_files(directory, sorted(names))
  outputs.delete_files(directory, [MANIFEST])
  if not paths.is_remote(directory):
    try:
      os.rmdir(directory)
    except OSError:
      pass
  return True


def retire(dest: str, keep: int, latest: int, retain_seconds: float = 0.0,
           now: Optional[float] = None) -> List[int]:
  """--keep K: delete the versions but the newest K published ones and LATEST's, and but
  those that were LATEST less than `retain_seconds` ago (--retain-hours): a reader that
  resolved LATEST before a newer version was published may still be reading one, as Delta
  Lake's VACUUM spares files younger than its retention period. A version stopped being
  LATEST when the next published one was made (its manifest's `created`); when that cannot
  be read, the version is kept. Called with the output lock held, once `latest` is
  published (versions never published are remove_unpublished's). Returns those deleted."""
  import time
  now = time.time() if now is None else now
  deleted = []
  published = [n for n in versions.numbers(dest) if n <= latest]
  kept = set(published[-keep:]) if keep else set(published)
  kept.add(latest)
  for i, n in enumerate(published):
    if n in kept:
      continue
    if retain_seconds > 0:
      superseded = _created(dest, published[i + 1])
      if superseded is None or now - superseded < retain_seconds:
        continue
    if delete_version(dest, n):
      deleted.append(n)
  return deleted


def _created(dest: str, number: int) -> Optional[float]:
  """When version `number` was made (its manifest's `created`, as a POSIX time), None when
  that cannot be read as one."""
  import datetime

  from beam_tfrecord.finalize import output as outputs
  try:
    created = outputs.load_manifest(versions.version_dir(dest, number)).created
    return datetime.datetime.fromisoformat(created).timestamp()
  except Exception:
    return None


def remove_unpublished(dest: str, latest: Optional[int]) -> List[int]:
  """Versions newer than LATEST: left by a run killed between making its version and naming
  it in LATEST, so never seen by a reader (readers go through LATEST). Called with the output
  lock held, before a run picks its version number."""
  gone = []
  for n in versions.numbers(dest):
    if (latest is None or n > latest) and delete_version(dest, n):
      gone.append(n)
  return gone


def manifest_json(manifest: Manifest) -> bytes:
  """manifest.json's bytes, as Finalize writes them and a gs:// version is claimed with."""
  return json.dumps(manifest.to_json(), indent=2, ensure_ascii=False).encode("utf-8")

"""Writing one shard: read, convert and frame a shard's images into one TFRecord file.

`write_shard` is the whole job of the shard writer DoFn (sink._WriteShard) for one
(split, shard) group, as a plain function of a picklable `ShardTask`. On the in-process local
runner the DoFn hands shards to a `WriterPool` of processes, so that conversion uses every core
(the local runner runs the write stage on one thread). Each shard is still written by exactly
one writer, in (key, uri) order, so the bytes do not depend on the number of processes.

This module does not import Apache Beam for local files: a writer process imports it and the
encoder only (0.4 s), where `import apache_beam` alone took 3.8 s on this machine.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import marshal
import os
import stat
import uuid
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from beam_tfrecord.storage import progress
from beam_tfrecord.plan import naming, runs
from beam_tfrecord.records import batches, packed
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.records.tfrecord import framing
from beam_tfrecord.storage import paths, processes
from beam_tfrecord.storage.layout import kill_point
from beam_tfrecord.storage.prefetch import prefetch
from beam_tfrecord.write import contents as content_digests
from beam_tfrecord.write import catalog
from beam_tfrecord.write.encode import (Converted, EncodeOptions, convert,
                                        fetch_image)

# Read-ahead of the shard writer (beam_tfrecord.storage.prefetch): threads, and a cap on the bytes
# fetched but not yet written. Writer processes (WriterPool) read their local files inline:
# with every core converting, read-ahead threads only took turns with them (20,000 images,
# 2 processes: 19.5-20.8 s with two threads each, 17.6-18.0 s without).
REMOTE_READ_AHEAD = 16
LOCAL_READ_AHEAD = 2
READ_AHEAD_BYTES = 64 * 1024 * 1024
WRITE_BUFFER_BYTES = 1024 * 1024

# images: images written (a schema may write several records, `examples`, per image, or none);
# rejected: images of this shard/split turned down while writing. images + rejected must add
# up to the planned count (the finalize step checks, so a runner that loses records fails).
# --append (an earlier version's shard and catalog): images added to the shard, changed,
# removed from it, unchanged; reused: images whose records were copied, not encoded again.
STAT_COUNTS = ("examples", "objects", "bytes", "clipped", "reoriented", "rejected", "images",
               "added", "changed", "removed", "unchanged", "reused")


def new_stats(split: str, shard: Optional[int], path: str) -> Dict:
  stats = {"split": split, "shard": shard, "path": path, "classes": {}}
  stats.update({k: 0 for k in STAT_COUNTS})
  return stats


def add_example(stats: Dict, result: Converted) -> None:
  stats["images"] += 1
  stats["examples"] += len(result.records)
  stats["objects"] += len(result.labels)
  stats["clipped"] += result.clipped
  stats["reoriented"] += int(result.reoriented)
  classes = stats["classes"]
  for label in result.labels:
    classes[label] = classes.get(label, 0) + 1


def merge_stats(items: Iterable[Dict]) -> Dict:
  """Associative merge of stats dicts of one (split, shard); usable as a CombineFn."""
  items = list(items)
  merged = dict(items[0], classes={})
  for key in STAT_COUNTS:
    merged[key] = sum(i[key] for i in items)
  for item in items:
    for name, n in item["classes"].items():
      merged["classes"][name] = merged["classes"].get(name, 0) + n
  merged["classes"] = dict(sorted(merged["classes"].items()))
  return merged


@dataclasses.dataclass
class ShardTask:
  """One (split, shard) and everything needed to write it: its images are those at positions
  [lo, hi) of the runs (plan/runs.py) it names, read here."""
  staging: str                     # the run directory the shard is written into
  split: str
  shard: int
  num_shards: int
  runs: List[Tuple[str, int]]      # (run file, position of its first image), in order
  lo: int
  hi: int
  by_records: bool                 # positions count records (--records-per-shard)
  label_map: Mapping[str, int]
  options: EncodeOptions
  template: str = naming.DEFAULT_SHARD_NAME_TEMPLATE
  read_ahead: int = 0              # read-ahead threads; 0: by where the images are
  remote_images: bool = False
  index: bool = False              # write the shard's catalog partition (catalog.py)
  # this shard in the earlier version: (its file, its catalog partition)
  previous: Optional[Tuple[str, str]] = None
  reuse: bool = False              # copy unchanged images' records from `previous`
  # --append (write/transform.segment_task): the base ranges this shard covers; `members`:
  # only the images `previous`'s partition lists; `exclude`: only images none of these list
  segment: Optional[Tuple[int, int]] = None
  members: bool = False
  exclude: Optional[Tuple[Tuple[str, str, int], ...]] = None  # (partition, its digest, rows)
  delta: bool = False              # --append: this file is (or stays) a delta shard
  # `previous`'s file stamp, catalog partition digest and rows as its version recorded them
  recorded: Tuple[str, str, int] = ("", "", -1)
  # local runners: content digests spilled here (contents.Collected), not returned
  contents_directory: Optional[str] = None


@dataclasses.dataclass
class ShardResult:
  stats: Dict                      # new_stats + add_example, `path` (and `staged`) set
  errors: List[ErrorRecord]
  # (hex SHA-256 of the file as read, split, key, uri) of each image written, kept or copied
  # (the digest its earlier catalog row has): write/leakage.py groups them by digest;
  # with the task's contents_directory, `spilled` names the files they went to instead
  contents: List[content_digests.Content] = dataclasses.field(default_factory=list)
  spilled: List[content_digests.Spilled] = dataclasses.field(default_factory=list)


def _create(uri: str):
  if paths.is_remote(uri):
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.create(uri)
  # a buffer of many records: with the default 8 KB, each image-sized record was its own
  # write() and its 12-byte header another
  return open(uri, "wb", buffering=WRITE_BUFFER_BYTES)


def _rename(src: str, dst: str) -> None:
  if paths.is_remote(src):
    from apache_beam.io.filesystems import FileSystems
    FileSystems.rename([src], [dst])
  else:
    os.replace(src, dst)


def _size(uri: str) -> int:
  return paths.size_of(uri) if paths.is_remote(uri) else os.path.getsize(uri)


def write_shard(task: ShardTask) -> ShardResult:
  """Write one shard under a unique hidden name, then rename it to its staging name.

  Images go in shard order (the runs', one per file: plan/shard_plan.sort_partition); one
  image's records stay together. A retried shard rewrites the same bytes under the same name;
  two attempts at once write two partial files (the name is the attempt's), and either
  rename leaves the same shard. Bad images become errors; only I/O failures of the shard file
  raise."""
  if task.index or task.previous or task.segment is not None:
    return write_indexed_shard(task)
  split, shard, num_shards = task.split, task.shard, task.num_shards
  name = naming.shard_name(split, shard, num_shards)
  final = paths.child(task.staging, name)  # child: checked where it is written
  partial = paths.child(task.staging, f".part-{uuid.uuid4().hex}-{name}")
  stats = new_stats(split, shard, name)
  errors: List[ErrorRecord] = []
  found = content_digests.Collected(split, task.contents_directory)
  done = progress.ShardCounter(task.staging, name)
  anns = map(packed.unpack, runs.select(task.runs, task.lo, task.hi, task.by_records))
  # read-ahead threads: object stores wait on round trips, local files on little
  # (measured in benchmarks/README.md)
  workers = task.read_ahead or (REMOTE_READ_AHEAD if task.remote_images else LOCAL_READ_AHEAD)
  limit = task.options.max_image_bytes  # larger files are rejected from a stat, unread
  ahead = prefetch(anns, lambda a: fetch_image(a, task.options),
                   lambda a: min(a.size_bytes or 0, limit), workers, READ_AHEAD_BYTES)
  with _create(partial) as f:
    for ann, fetched in ahead:
      if "first" not in stats:  # where the shard begins: the manifest's shard_plan
        stats["first"] = [packed.identity_hash(ann.key), ann.key, ann.uri]
      tapped = content_digests.Tapped(fetched)
      result = convert(ann, task.label_map, task.options, tapped)
      done.tick()
      errors.extend(result.errors)
      if result.records is None:
        stats["rejected"] += 1
        continue
      if tapped.digest:
        found.add(tapped.digest, ann.key, ann.uri)
      for record in result.records:
        head, tail = framing(record)
        f.write(head)
        f.write(record)
        f.write(tail)
      add_example(stats, result)
  kill_point("shard")  # in the writer process, when there are several
  _rename(partial, final)
  done.close()
  stats["bytes"] = _size(final)
  _named(task, stats, name)
  return ShardResult(stats, errors, found.items, found.spilled())


def _with_digests(blobs: Iterable[bytes]):
  """(ImageAnnotation, catalog.digest_plain) of each packed blob, unmarshalled once."""
  for blob in blobs:
    image = marshal.loads(blob)
    yield batches.FROM_PLAIN(image), catalog.digest_plain(image)


def _named(task: ShardTask, stats: Dict, name: str) -> None:
  """The file's final name (--shard-name-template; {count} is known only now); it keeps its
  unique staging name until the finalize step moves it there."""
  named = naming.format_shard_name(task.template, task.split, task.shard, task.num_shards,
                                   stats["examples"])
  if named != name:
    stats["path"], stats["staged"] = named, name
  stats["classes"] = dict(sorted(stats["classes"].items()))


def _add_entry(stats: Dict, entry: catalog.Entry) -> None:
  """An image's stats from its catalog row: what add_example (or a rejection) counted."""
  if entry.rejected:
    stats["rejected"] += 1
    return
  stats["images"] += 1
  stats["examples"] += entry.records
  stats["objects"] += entry.objects
  stats["clipped"] += entry.clipped
  stats["reoriented"] += entry.reoriented
  for label in entry.labels:
    stats["classes"][label] = stats["classes"].get(label, 0) + 1


def _identities(indexes: Sequence[Tuple[str, str, int]]) -> Set[int]:
  """64-bit digests of the images the earlier shards' partitions list (a new delta shard
  leaves them out; at most shard_plan.MAX_DELTA_SCAN_IMAGES of them). A partition refused
  lists none, as it does for the writer of its own shard: both decide from the same bytes,
  so every image has exactly one shard. (Two digests that collide would leave an added image
  out: the run's counts then differ from the plan's and --append makes a full version.)"""
  found: Set[int] = set()
  for uri, recorded, rows in indexes:
    for entry in catalog.read_checked(uri, recorded, rows)[0] or ():
      found.add(_identity_digest(entry.identity))
  return found


def _identity_digest(identity: catalog.Identity) -> int:
  return int.from_bytes(hashlib.blake2b(
      "\0".join(identity).encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def _kept_file_ok(uri: str, old: Sequence[catalog.Entry], recorded: str = "") -> bool:
  """The earlier shard may be kept as it is: a regular file (not a link) whose size is where
  its catalog's last record ends and, locally, whose stamp is the one its version recorded
  (catalog.file_stamp). Then its records are not read (that would cost what keeping saves).
  A version's file whose stamp differs (written into: hard links are read-only, but not to
  root; or only linked again) or was never recorded is kept only if every record its
  catalog lists checks out (catalog.checked_range: framing, CRCs, digest); otherwise the
  writer copies the ranges that check and encodes the others again."""
  end = max((e.offset + e.length for e in old), default=0)
  try:
    if paths.is_remote(uri):  # an object is never changed in place (a new generation)
      return _size(uri) == end
    st = os.lstat(uri)
  except OSError:
    return False
  if not stat.S_ISREG(st.st_mode) or st.st_size != end:
    return False
  if recorded and catalog.file_stamp(uri) == recorded:
    return True
  try:
    with catalog.open_earlier(uri) as f:
      return all(catalog.checked_range(f, e) is not None for e in old if e.length)
  except OSError:
    return False


def write_indexed_shard(task: ShardTask) -> ShardResult:
  """write_shard with the shard's catalog partition (--append), and with an earlier
  version's shard to compare with (`previous`, `reuse`).

  Pass 1 reads the shard's annotations from the runs for each image's identity, stamp (no
  image read: catalog.stamp) and annotation digest, O(images of the shard) small tuples.
  With --append, a segment of an earlier shard file takes only the images its catalog
  partition lists (`members`), a new delta shard only those no earlier partition lists
  (`exclude`). When every image and its order equal the earlier partition's, the shard is
  kept: nothing is written, its stats and errors come from the partition and `kept_from`
  names the earlier file (the finalize step links or copies it). Otherwise pass 2 writes the
  shard: unchanged images' record bytes copied from the earlier file (each range checked:
  catalog.checked_range), the others read and encoded. Either way each image's records are
  those a full run writes."""
  split, shard, num_shards = task.split, task.shard, task.num_shards
  name = naming.shard_name(split, shard, num_shards)
  index_name = catalog.index_name(split, shard, num_shards)
  stats = new_stats(split, shard, name)
  if task.segment is not None:
    stats["segment"] = list(task.segment)
    stats["delta"], stats["new"] = task.delta, not task.members
  errors: List[ErrorRecord] = []
  old, old_digest = (catalog.read_checked(task.previous[1], *task.recorded[1:])
                     if task.previous else (None, ""))
  if task.previous and old is None:  # its images are encoded again: say so (--append counts it)
    errors.append(ErrorRecord(
        source=task.previous[1], stage="write", reason="earlier_index_damaged", key=name,
        level="warning", message=f"the catalog partition {task.previous[1]} cannot be read "
        "or is not the one its version recorded; its shard's images are encoded again"))
  old_by_id = catalog.by_identity(old) if old is not None else {}
  if task.members:  # an earlier shard file: its own images only
    wanted = lambda identity: identity in old_by_id  # noqa: E731
  elif task.exclude is not None:  # a new delta shard: images no earlier shard holds
    held = _identities(task.exclude)
    wanted = lambda identity: _identity_digest(identity) not in held  # noqa: E731
  else:
    wanted = lambda identity: True  # noqa: E731
  selected = lambda: ((a, dg) for a, dg in _with_digests(runs.select(  # noqa: E731
      task.runs, task.lo, task.hi, task.by_records)) if wanted((a.key, a.uri)))
  # nothing to compare with and every image its own (a first or full version): each image's
  # stamp and digest are taken as it is written, in one read of the runs
  one_pass = old is None and task.segment is None
  infos, sources = [], []
  for a, dg in () if one_pass else selected():
    infos.append((a.key, a.uri, catalog.stamp(a.uri), dg))
    sources.append(a.source)
  stats["index"] = index_name
  if infos:
    first = infos[0]
    stats["first"] = [packed.identity_hash(first[0]), first[0], first[1]]
  if old is not None:
    new_ids = {(k, u) for k, u, _, _ in infos}
    stats["removed"] = sum(1 for i in old_by_id if i not in new_ids)
    for k, u, st, dg in infos:
      before = old_by_id.get((k, u))
      kind = "added" if before is None else "unchanged" if before.same_as(st, dg) else "changed"
      stats[kind] += 1
  elif task.exclude is not None:
    stats["added"] = len(infos)
  if task.segment is not None and not infos:  # nothing of its own left: no file
    stats["empty"] = True
    _named(task, stats, name)
    return ShardResult(stats, errors)
  reuse = task.reuse and old is not None
  # kept whole only if its partition would not change either: the errors it lists name the
  # annotation files the images come from now
  if reuse and len(old) == len(infos) and all(
      e.identity == (k, u) and e.same_as(st, dg) and
      all(dict(fields)["source"] == source for fields in e.errors)
      for e, (k, u, st, dg), source in zip(old, infos, sources)) and \
      _kept_file_ok(task.previous[0], old, task.recorded[0]):
    for entry, source in zip(old, sources):
      _add_entry(stats, entry)
      errors.extend(entry.error_records(source))
    found = _indexed_contents(task, old)
    stats["reused"] = stats["images"] + stats["rejected"]
    stats["bytes"] = _size(task.previous[0])
    stats["kept_from"], stats["kept_index"] = task.previous
    stats["index_digest"] = old_digest
    _named(task, stats, name)
    return ShardResult(stats, errors, found.items, found.spilled())

  final = paths.child(task.staging, name)  # child: checked where it is written
  partial = paths.child(task.staging, f".part-{uuid.uuid4().hex}-{name}")
  done = progress.ShardCounter(task.staging, name)
  reusable = [reuse and (k, u) in old_by_id and old_by_id[(k, u)].same_as(st, dg)
              for k, u, st, dg in infos]
  limit = task.options.max_image_bytes
  workers = task.read_ahead or (REMOTE_READ_AHEAD if task.remote_images else LOCAL_READ_AHEAD)
  flags = itertools.repeat(False) if one_pass else iter(reusable)
  taken = iter(infos)
  ahead = prefetch(
      ((a, next(flags), dg) for a, dg in selected()),
      lambda item: (b"", "") if item[1] else fetch_image(item[0], task.options),
      lambda item: 0 if item[1] else min(item[0].size_bytes or 0, limit), workers,
      READ_AHEAD_BYTES)
  entries: List[catalog.Entry] = []
  earlier = None
  damaged = 0
  offset = 0
  try:
    with _create(partial) as f:
      for ((ann, copy, dg), fetched) in ahead:
        key, uri, st, dg = (ann.key, ann.uri, catalog.stamp(ann.uri), dg) \
            if one_pass else next(taken)
        done.tick()
        data = None
        if copy:
          if earlier is None:
            try:
              earlier = catalog.open_earlier(task.previous[0])
            except OSError:
              earlier = False
          if earlier:
            data = catalog.checked_range(earlier, old_by_id[(key, uri)])
          if data is None:  # not what its catalog says: encoded again
            damaged += 1
            fetched = functools.partial(fetch_image, ann, task.options)
        if data is not None:
          f.write(data)
          entry = old_by_id[(key, uri)]
          entry_errors = entry.error_records(ann.source)
          entry = dataclasses.replace(entry, offset=offset,
                                      errors=catalog.errors_of(entry_errors))
          stats["reused"] += 1
        else:
          tapped = content_digests.Tapped(fetched)
          result = convert(ann, task.label_map, task.options, tapped)
          framed, frames = [], []  # written part by part: no image-sized join
          for record in result.records or ():
            head, tail = framing(record)
            framed.extend((head, record, tail))
            frames.extend((head, tail))
          for part in framed:
            f.write(part)
          entry = catalog.Entry(
              key=key, uri=uri, stamp=st, digest=dg, offset=offset,
              length=sum(len(part) for part in framed),
              records=len(result.records or ()), objects=len(result.labels or ()),
              clipped=result.clipped, reoriented=int(result.reoriented),
              labels=tuple(result.labels or ()), errors=catalog.errors_of(result.errors),
              rejected=result.records is None,
              sha=catalog.record_digest(key, uri, frames),
              content=(tapped.digest or "") if result.records is not None else "")
          entry_errors = list(result.errors)
        offset += entry.length
        _add_entry(stats, entry)
        errors.extend(entry_errors)
        entries.append(entry)
  finally:
    if earlier:
      earlier.close()
  if damaged:
    stats["damaged"] = damaged
    errors.append(ErrorRecord(
        source=task.previous[0], stage="write", reason="earlier_shard_damaged",
        key=name, level="warning",
        message=f"{damaged} image(s) of the earlier shard {task.previous[0]} were not what "
        "its catalog says (framing, CRC or digest); they were encoded again"))
  if one_pass and entries:
    stats["first"] = [packed.identity_hash(entries[0].key), entries[0].key, entries[0].uri]
  found = _indexed_contents(task, entries)
  stats["index_digest"] = _write_index(task.staging, index_name, entries)
  kill_point("shard")
  _rename(partial, final)
  done.close()
  stats["bytes"] = _size(final)
  _named(task, stats, name)
  return ShardResult(stats, errors, found.items, found.spilled())


def _indexed_contents(task: ShardTask, entries: Sequence[catalog.Entry]
                      ) -> content_digests.Collected:
  """The contents of an indexed shard: each written image's digest, from its catalog row
  whether it was encoded now or kept or copied from the earlier shard."""
  found = content_digests.Collected(task.split, task.contents_directory)
  for e in entries:
    if e.content and not e.rejected:
      found.add(e.content, e.key, e.uri)
  return found


def _write_index(staging: str, name: str, entries: List[catalog.Entry]) -> str:
  """The shard's catalog partition, under a unique name renamed into place (a retry rewrites
  it). Returns its digest (catalog.file_digest), which the manifest records."""
  final = paths.child(staging, name)
  partial = paths.child(staging, f".part-{uuid.uuid4().hex}-{name}")
  data = catalog.encode(entries)
  with _create(partial) as f:
    f.write(data)
  _rename(partial, final)
  return catalog.file_digest(data)


# A writer process costs ~0.3 s to start (0.6 s on a busy machine) and converts ~1,400 images
# a second: below this many images per process, starting one does not pay.
MIN_IMAGES_PER_PROCESS = 1000


def processes_for(limit: int, images: int, shards: int, min_images: int) -> int:
  """How many writer processes a run of `images` in `shards` shards uses, at most `limit`;
  1 means writing in the runner's own process."""
  if min_images:
    limit = min(limit, images // min_images)
  return max(1, min(limit, shards))


class WriterPool(processes.Pool):
  """Shard writer processes (storage/processes.Pool): `submit` hands a ShardTask to the next
  free one, which answers write_shard(task)."""

  def __init__(self, count: int):
    super().__init__(count, "beam_tfrecord.write.shard_writer:write_shard")

  def died(self, task: ShardTask, code) -> processes.ProcessDied:
    return processes.ProcessDied(
        f"a shard writer process died (exit code {code}: killed, or out of memory? try fewer "
        f"--writer-processes) while writing {task.split} shard {task.shard}")

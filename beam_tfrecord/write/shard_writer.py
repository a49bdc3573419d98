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
import marshal
import os
import uuid
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from beam_tfrecord.plan import compare, naming, runs
from beam_tfrecord.records import batches, packed
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import catalog, paths, processes, progress, record_files
from beam_tfrecord.storage.layout import kill_point
from beam_tfrecord.storage.prefetch import prefetch
from beam_tfrecord.write import contents as content_digests
from beam_tfrecord.write import segments
from beam_tfrecord.write.encode import (Converted, EncodeOptions, convert,
                                        fetch_image)

# Read-ahead of the shard writer (beam_tfrecord.storage.prefetch): threads, and a cap on the bytes
# fetched but not yet written. Writer processes (WriterPool) read their local files inline:
# with every core converting, read-ahead threads only took turns with them (20,000 images,
# 2 processes: 19.5-20.8 s with two threads each, 17.6-18.0 s without).
REMOTE_READ_AHEAD = 16
LOCAL_READ_AHEAD = 2
READ_AHEAD_BYTES = 64 * 1024 * 1024

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
  container: record_files.Container = record_files.Container()  # --file-format, --index-files
  # --append (write/transform.segment_task; write/segments.py): the base ranges this shard
  # covers, and the earlier file it is (None: a new delta shard) with its check
  segment: Optional[Tuple[int, int]] = None
  delta: bool = False              # this file is (or stays) a delta shard
  earlier: Optional[compare.EarlierFile] = None
  check: Optional[compare.FileCheck] = None
  changes: int = 0                 # the changes it takes from `change_runs` (plan/compare)
  change_runs: List[str] = dataclasses.field(default_factory=list)
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
  if task.segment is not None:
    return write_segment(task)
  if task.index:
    return write_indexed_shard(task)
  split, shard, num_shards = task.split, task.shard, task.num_shards
  name = naming.shard_name(split, shard, num_shards, task.container.suffix)
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
  with record_files.create(partial, task.container) as out:
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
        out.write(record)
      add_example(stats, result)
  _write_index_file(task, stats, out.spans, name)
  kill_point("shard")  # in the writer process, when there are several
  _rename(partial, final)
  done.close()
  stats["bytes"] = _size(final)
  _named(task, stats, name)
  return ShardResult(stats, errors, found.items, found.spilled())


def _write_index_file(task: ShardTask, stats: Dict, spans, name: str) -> None:
  """--index-files: the shard's index (record_files), under a unique name renamed into place
  before the shard is (a retry rewrites both); the finalize step moves it with the shard
  (stats `index_file`: the name it was written under)."""
  if spans is None:
    return
  stats["index_file"] = record_files.index_name(name)
  _write_new(task.staging, stats["index_file"], record_files.index_text(spans))


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


def write_indexed_shard(task: ShardTask) -> ShardResult:
  """write_shard with the shard's catalog partition (a first or full version of --append):
  each image's stamp (catalog.stamp: no image read) and annotation digest are taken as it
  is written, in one read of the runs."""
  name = naming.shard_name(task.split, task.shard, task.num_shards, task.container.suffix)
  stats = new_stats(task.split, task.shard, name)
  items = ((ann, dg, None) for ann, dg in _with_digests(
      runs.select(task.runs, task.lo, task.hi, task.by_records)))
  return write_catalogued(task, stats, [], items)


def write_segment(task: ShardTask) -> ShardResult:
  """--append: one segment of a kept split (write/segments.py): no file, the earlier file
  kept whole, or a file written from its changes."""
  name = naming.shard_name(task.split, task.shard, task.num_shards, task.container.suffix)
  stats = new_stats(task.split, task.shard, name)
  outcome = segments.segment(task, stats)
  if outcome.kind == "write":
    return write_catalogued(task, stats, [], outcome.items, outcome.earlier)
  if outcome.kind == "kept":
    stats["bytes"] = _size(task.earlier.shard)
    if task.container.index_files:  # from the kept file (its check passed), not its old index
      _write_index_file(task, stats, record_files.scan_spans(task.earlier.shard), name)
  else:
    stats["empty"] = True
  _named(task, stats, name)
  found = outcome.found
  return ShardResult(stats, list(outcome.errors), found.items if found else [],
                     found.spilled() if found else [])


def write_catalogued(task: ShardTask, stats: Dict, errors: List[ErrorRecord],
                     items: Iterable[Tuple], earlier: Optional[str] = None) -> ShardResult:
  """Write the shard and its catalog partition from `items`, in shard order: (annotation, its
  digest, None) of an image to read and encode, or (None, None, catalog.Entry) of an image
  of the `earlier` shard file whose records are copied (each range checked:
  catalog.checked_range; they passed their check before the run sorted, so one that fails
  now changed during the run, which fails it). Each image's records are those a full run
  writes; ShardResult.entries are the partition's rows."""
  name = naming.shard_name(task.split, task.shard, task.num_shards, task.container.suffix)
  index_name = catalog.index_name(task.split, task.shard, task.num_shards)
  stats["index"] = index_name
  final = paths.child(task.staging, name)  # child: checked where it is written
  partial = paths.child(task.staging, f".part-{uuid.uuid4().hex}-{name}")
  done = progress.ShardCounter(task.staging, name)
  limit = task.options.max_image_bytes
  workers = task.read_ahead or (REMOTE_READ_AHEAD if task.remote_images else LOCAL_READ_AHEAD)
  ahead = prefetch(
      items, lambda item: (b"", "") if item[2] else fetch_image(item[0], task.options),
      lambda item: 0 if item[2] else min(item[0].size_bytes or 0, limit), workers,
      READ_AHEAD_BYTES)
  entries: List[catalog.Entry] = []
  source = None
  try:
    with record_files.create(partial, task.container, framed=True) as out:
      for (ann, dg, kept), fetched in ahead:
        done.tick()
        offset = out.position
        if kept is not None:
          if source is None:
            source = record_files.EarlierShard(earlier, task.container.file_format)
          data = catalog.checked_range(source, kept) if kept.length else []
          if data is None:
            raise RuntimeError(f"the records of {kept.uri} in {earlier} changed during the run")
          out.copy(data)
          entry = dataclasses.replace(kept, offset=offset)
          entry_errors = entry.error_records()
          stats["reused"] += 1
        else:
          tapped = content_digests.Tapped(fetched)
          result = convert(ann, task.label_map, task.options, tapped)
          frames = []
          for record in result.records or ():
            frames.extend(out.write(record))
          entry = catalog.Entry(
              key=ann.key, uri=ann.uri, stamp=catalog.stamp(ann.uri), digest=dg, offset=offset,
              length=out.position - offset,
              records=len(result.records or ()), objects=len(result.labels or ()),
              clipped=result.clipped, reoriented=int(result.reoriented),
              labels=tuple(result.labels or ()), errors=catalog.errors_of(result.errors),
              rejected=result.records is None,
              sha=catalog.record_digest(ann.key, ann.uri, frames),
              content=(tapped.digest or "") if result.records is not None else "")
          entry_errors = list(result.errors)
        _add_entry(stats, entry)
        errors.extend(entry_errors)
        entries.append(entry)
  finally:
    if source is not None:
      source.close()
  if entries:  # where the shard begins: the manifest's shard_plan
    stats["first"] = [packed.identity_hash(entries[0].key), entries[0].key, entries[0].uri]
  found = _indexed_contents(task, entries)
  stats["index_digest"] = _write_index(task.staging, index_name, entries)
  _write_index_file(task, stats, out.spans, name)
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
  data = catalog.encode(entries)
  _write_new(staging, name, data)
  return catalog.file_digest(data)


def _write_new(staging: str, name: str, data: bytes) -> None:
  """A small file of the run (an index) under a unique name, renamed into place."""
  final = paths.child(staging, name)
  partial = paths.child(staging, f".part-{uuid.uuid4().hex}-{name}")
  if paths.is_remote(partial):
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.create(partial) as f:
      f.write(data)
  else:
    with os.fdopen(record_files.create_new(partial, keep=True), "wb") as f:
      f.write(data)
  _rename(partial, final)


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

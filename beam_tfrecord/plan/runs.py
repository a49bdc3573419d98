"""Sorted runs: one file per (split, run) holding the images of a run's partitions (one, or
shard_plan.LOCAL_RUN_SPAN on local runners) in shard order, written once by
plan/transform.SortRuns (sort_run; on the in-process runner in worker processes,
sort_spilled_run) and read by the shard writers whose ranges touch it.
Beam-free for local files (writer processes read them).

An entry is the image's record count (4 bytes, little-endian) and its packed annotation
(records/packed BLOB), framed as storage/spill frames records.
"""
from __future__ import annotations

import io
import os
import struct
import uuid
import marshal
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from beam_tfrecord.plan import compare, shard_plan
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import paths, spill

_RECORDS = struct.Struct("<I")


def run_name(split: str, run: int) -> str:
  return f"run-{split}-{run:05d}"


def write_run(directory: str, split: str, run: int, entries: Sequence[packed.Packed]) -> str:
  """Write a run's sorted images of one split; returns the run's path."""
  return _write(directory, run_name(split, run),
                [_RECORDS.pack(e[packed.RECORDS]) + e[packed.BLOB] for e in entries])


def _write(directory: str, name: str, records: Sequence[bytes]) -> str:
  """Framed records written under a unique name and renamed, so a retried bundle replaces
  the file whole."""
  final = paths.child(directory, name)
  data = io.BytesIO()
  spill.write_records(data, records)
  partial = paths.child(directory, f".part-{uuid.uuid4().hex}-{name}")
  if paths.is_remote(directory):
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.create(partial) as f:
      f.write(data.getvalue())
    FileSystems.rename([partial], [final])
  else:
    os.makedirs(directory, exist_ok=True)
    with open(partial, "wb") as f:
      f.write(data.getbuffer())
    os.replace(partial, final)
  return final


def _read(path: str) -> bytes:
  if paths.is_remote(path):
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path, compression_type="uncompressed") as f:
      return f.read()
  with open(path, "rb") as f:
    return f.read()


# --append: a run of a split the earlier version has holds only what changed (plan/compare):
# (records, earlier file, row, packed annotation) of each image to encode (file -1: added
# since, `row` its base range), and (0, file, row, b"") of each row no image keeps (removed)
_CHANGE = struct.Struct("<Iii")
Change = Tuple[int, int, int, bytes]


def changes_name(split: str, run: int) -> str:
  return f"changes-{split}-{run:05d}"


def write_changes(directory: str, split: str, run: int, changes: Sequence[Change]) -> str:
  return _write(directory, changes_name(split, run),
                [_CHANGE.pack(records, file, row) + blob for records, file, row, blob in changes])


def read_changes(path: str) -> Iterator[Change]:
  for record in spill.iter_records(_read(path)):
    yield (*_CHANGE.unpack_from(record), record[_CHANGE.size:])


def read_run(path: str) -> Iterator[Tuple[int, bytes]]:
  """(records, packed annotation) of each image of a run, in shard order."""
  for record in spill.iter_records(_read(path)):
    yield _RECORDS.unpack_from(record)[0], record[4:]


def select(runs: Sequence[Tuple[str, int]], lo: int, hi: int, by_records: bool
           ) -> Iterator[bytes]:
  """The packed annotations whose position is in [lo, hi), from runs given as (path, position
  of the run's first image), in order. A position counts images, or records (by_records):
  an image goes with its first record."""
  for path, position in runs:
    for records, blob in read_run(path):
      if position >= hi:
        return
      if position >= lo:
        yield blob
      position += records if by_records else 1


def shard_runs(directory: str, split: str, runs: List[Tuple[int, int]]
               ) -> List[Tuple[str, int]]:
  """(path, first position) of SplitPlan.runs_of's runs."""
  return [(paths.child(directory, run_name(split, run)), position) for run, position in runs]


Counts = List[Tuple[Tuple[str, int], Tuple[int, int, int]]]


def sort_run(directory: str, run: int, entries: Iterable[packed.Packed],
             earlier: Optional[Dict[str, compare.CompareSplit]] = None, span: int = 1
             ) -> Tuple[Counts, List[ErrorRecord]]:
  """A run's images sorted, one per file and split (shard_plan.sort_partition), written as one
  run per split into `directory`: (((split, partition), (images, records, bytes)) of its
  partitions; the duplicates' errors). With `earlier` (--append: the splits the earlier
  version has, plan/compare), such a split's run holds only its changes (write_changes), and
  the counts also say, for each earlier bound, how many images of its partition sort before
  it, per earlier file how many of its rows changed or went (shard_plan.DIRTY) and per base
  range how many images were added (shard_plan.ADDED). Run `run` holds partitions
  [run * span, (run + 1) * span)."""
  earlier = earlier or {}
  by_split, errors = shard_plan.sort_partition(entries)
  counts: Counts = []
  for split in sorted(set(by_split) | set(earlier)):
    unique = by_split.get(split, [])
    if unique:
      counts += shard_plan.partition_counts(split, unique).items()
    context = earlier.get(split)
    if context is None:
      write_run(directory, split, run, unique)
      continue
    counts += shard_plan.counts_below_bounds(split, unique, context.bounds).items()
    rows = compare.catalog_rows(context, run * span, (run + 1) * span - 1)
    changes, dirty, added = compare.compare_run(unique, rows, context)
    write_changes(directory, split, run, changes)
    counts += [((split, (shard_plan.DIRTY, f)), (n, 0, 0)) for f, n in sorted(dirty.items())]
    counts += [((split, (shard_plan.ADDED, r)), (n, 0, 0)) for r, n in sorted(added.items())]
  return counts, errors


class SpilledRun(NamedTuple):
  """One run of a local run's sort: its spill files (plan/transform._SpillPartitions)."""
  directory: str
  run: int
  files: Tuple[str, ...]
  earlier: Dict[str, compare.CompareSplit]
  span: int


def sort_spilled_run(task: SpilledRun) -> Tuple[Counts, List[ErrorRecord]]:
  """sort_run of the images in a run's spill files (a worker process's task)."""
  entries = [marshal.loads(r) for path in task.files for r in spill.read_records(path)]
  return sort_run(task.directory, task.run, entries, task.earlier, task.span)

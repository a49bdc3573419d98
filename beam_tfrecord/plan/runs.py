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
from typing import Dict, Iterable, Iterator, List, NamedTuple, Sequence, Tuple

from beam_tfrecord.plan import shard_plan
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import paths, spill

_RECORDS = struct.Struct("<I")


def run_name(split: str, run: int) -> str:
  return f"run-{split}-{run:05d}"


def write_run(directory: str, split: str, run: int, entries: Sequence[packed.Packed]) -> str:
  """Write a run's sorted images of one split; returns the run's path. Written under a
  unique name and renamed, so a retried bundle replaces it whole."""
  final = paths.child(directory, run_name(split, run))
  data = io.BytesIO()
  spill.write_records(data, [_RECORDS.pack(e[packed.RECORDS]) + e[packed.BLOB]
                             for e in entries])
  partial = paths.child(directory, f".part-{uuid.uuid4().hex}-{run_name(split, run)}")
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


def read_run(path: str) -> Iterator[Tuple[int, bytes]]:
  """(records, packed annotation) of each image of a run, in shard order."""
  if paths.is_remote(path):
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path, compression_type="uncompressed") as f:
      data = f.read()
  else:
    with open(path, "rb") as f:
      data = f.read()
  for record in spill.iter_records(data):
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
             bounds: Dict[str, Tuple[shard_plan.Bound, ...]]
             ) -> Tuple[Counts, List[ErrorRecord]]:
  """A run's images sorted, one per file and split (shard_plan.sort_partition), written as one
  run per split into `directory`: (((split, partition), (images, records, bytes)) of its
  partitions, and below each of `bounds` (--append) in its split; the duplicates' errors)."""
  by_split, errors = shard_plan.sort_partition(entries)
  counts: Counts = []
  for split, unique in sorted(by_split.items()):
    write_run(directory, split, run, unique)
    counts += shard_plan.partition_counts(split, unique).items()
    if split in bounds:
      counts += shard_plan.counts_below_bounds(split, unique, bounds[split]).items()
  return counts, errors


class SpilledRun(NamedTuple):
  """One run of a local run's sort: its spill files (plan/transform._SpillPartitions)."""
  directory: str
  run: int
  files: Tuple[str, ...]
  bounds: Dict[str, Tuple[shard_plan.Bound, ...]]


def sort_spilled_run(task: SpilledRun) -> Tuple[Counts, List[ErrorRecord]]:
  """sort_run of the images in a run's spill files (a worker process's task)."""
  entries = [marshal.loads(r) for path in task.files for r in spill.read_records(path)]
  return sort_run(task.directory, task.run, entries, task.bounds)

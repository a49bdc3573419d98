"""Sorted runs: one file per (split, run) holding the images of a run's partitions (one, or
shard_plan.LOCAL_RUN_SPAN on local runners) in shard order, written once by
plan/transform.SortRuns and read by the shard writers whose ranges touch it.
Beam-free for local files (writer processes read them).

An entry is the image's record count (4 bytes, little-endian) and its packed annotation
(records/packed BLOB), framed as storage/spill frames records.
"""
from __future__ import annotations

import io
import os
import struct
import uuid
from typing import Iterator, List, Sequence, Tuple

from beam_tfrecord.records import packed
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

"""Copies by content: images whose bytes are identical (equal SHA-256) under different names.

The shard writer hashes every image file it reads (encode.fetch; the digest is of the file as
read, so copies are found whatever --max-side or --image-format then writes). For each image
it writes it emits (digest, split, key, uri), a shard's in `batches`; write/leakage.py groups
them by digest, and `report` turns the copies of one content into warnings, one per extra
copy:
- `leaked_across_splits`: the first copy (in (split, key, uri) order) of a split whose bytes
  the first copy of another split already has, naming that file;
- `duplicate_content`: another copy in the same split, naming the split's first copy.
The same file listed in two splits is not a copy of itself: the plan reports it
(`in_two_splits`). Pure and Beam-free: writer processes import it.
"""
from __future__ import annotations

import bisect
import marshal
import os
import uuid
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from beam_tfrecord.records.manifest import Leakage
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage.spill import Spill

Copy = Tuple[str, str, str]          # (split, key, uri) of one written image
Content = Tuple[str, str, str, str]  # (hex SHA-256, split, key, uri): what the writer emits
# {split: [copies, its first MAX_NAMED copies in order]}: one content's copies, bounded
Copies = Dict[str, list]

# Copies of one content named one by one, per split; the rest are counted (a placeholder
# image copied 10,000 times is one line saying so, and a bounded accumulator).
MAX_NAMED = 100

# Contents go to FindCopies in lists of at most this many (~2 MB), bounded whatever a shard's
# size: one Beam element per image cost each image ~3.5 us more of the runner's code (its
# outputs, the count, the spill step; 100,000 images through FindCopies on the in-process
# runner, 12.5-13.8 -> 9.1-9.8 us an image with start-up, medians of 3, loaded 2-core machine).
BATCH = 10_000

# Local runners: contents go to spill files by their digest's first byte, one partition file
# read and sorted at a time (write/leakage.py): memory O(N / LOCAL_PARTITIONS) entries.
LOCAL_PARTITIONS = 64
# (partition, spill file, entries in it): what a bundle or a shard writer spilled
Spilled = Tuple[int, str, int]

LEAKED = "leaked_across_splits"
DUPLICATE = "duplicate_content"
# error-count keys (pipeline: flattened into the reason counts; Finalize takes them out)
PREFIX = "leakage:"
IMAGES = PREFIX + "images"


class Tapped:
  """A read-ahead result (encode.fetch's (bytes, hex SHA-256), or raises) that keeps the
  digest it returned, for convert() to call as it always does."""
  __slots__ = ("fetched", "digest")

  def __init__(self, fetched: Callable[[], Tuple[bytes, str]]):
    self.fetched: Callable[[], Tuple[bytes, str]] = fetched
    self.digest: Optional[str] = None

  def __call__(self) -> Tuple[bytes, str]:
    data, self.digest = self.fetched()
    return data, self.digest


def batches(items: List[Content]) -> Iterator[List[Content]]:
  """`items` in lists of at most BATCH, in order (none when empty)."""
  for start in range(0, len(items), BATCH):
    yield items[start:start + BATCH]


def partition_of(digest: bytes) -> int:
  return digest[0] * LOCAL_PARTITIONS // 256


def spill_record(digest: bytes, split: str, key: str, uri: str) -> bytes:
  return marshal.dumps((digest, split, key, uri))


class Collected:
  """One shard's (or bundle's) contents as they are found: kept in a list (`items`, for the
  runner's shuffle), or, with `directory` (local disk every worker of a local runner shares),
  appended to spill files of their own under it by partition, so that no process holds one
  entry per image: the shard writer's list came back whole to the runner's process, which
  held every shard's until the write step ended (1M small images: +540 MB at its end)."""

  def __init__(self, split: str, directory: Optional[str] = None):
    self.split = split
    self.items: List[Content] = []
    self._spill: Optional[Spill] = None
    self._counts: Dict[int, int] = {}
    if directory is not None:
      self._spill = Spill(LOCAL_PARTITIONS, os.path.join(directory, uuid.uuid4().hex))

  def add(self, digest: str, key: str, uri: str) -> None:
    if self._spill is None:
      self.items.append((digest, self.split, key, uri))
      return
    raw = bytes.fromhex(digest)
    p = partition_of(raw)
    if not self._counts:
      os.makedirs(self._spill.directory, exist_ok=True)
    self._counts[p] = self._counts.get(p, 0) + 1
    self._spill.add(p, spill_record(raw, self.split, key, uri))

  def spilled(self) -> List[Spilled]:
    """Flush; the (partition, file, entries) written (none without a directory)."""
    if self._spill is None:
      return []
    self._spill.flush()
    return [(p, self._spill.path(p), n) for p, n in sorted(self._counts.items())]


def new() -> Copies:
  return {}


def add(copies: Copies, copy: Copy) -> Copies:
  entry = copies.setdefault(copy[0], [0, []])
  entry[0] += 1
  _keep(entry[1], copy)
  return copies


def merge(many: Iterable[Copies]) -> Copies:
  merged: Copies = {}
  for copies in many:
    for split, (count, names) in copies.items():
      entry = merged.setdefault(split, [0, []])
      entry[0] += count
      for copy in names:
        _keep(entry[1], copy)
  return merged


def _keep(names: List[Copy], copy: Copy) -> None:
  """Insert `copy` into the sorted `names`, which keeps its MAX_NAMED first."""
  if len(names) < MAX_NAMED or copy < names[-1]:
    bisect.insort(names, copy)
    del names[MAX_NAMED:]


def report(digest: str, copies: Copies) -> Tuple[List[ErrorRecord], Dict[str, int]]:
  """(warnings, {reason: extra copies}) of one content's copies: one warning per named extra
  copy (and one per split for copies past MAX_NAMED), counts of every extra copy."""
  heads = {split: names[0] for split, (_, names) in copies.items()}
  first = min(heads.values())
  records: List[ErrorRecord] = []
  counts = {LEAKED: 0, DUPLICATE: 0}
  for split in sorted(copies):
    count, names = copies[split]
    head = heads[split]
    if split != first[0] and head[2] != first[2]:
      counts[LEAKED] += 1
      records.append(_warning(LEAKED, head, digest, f"{head[2]} (split {split}) has the same "
                              f"bytes as {first[2]} in split {first[0]}: an evaluation on one "
                              "of them sees an image of the other"))
    counts[DUPLICATE] += count - 1
    for copy in names[1:]:
      records.append(_warning(DUPLICATE, copy, digest, f"{copy[2]} has the same bytes as "
                              f"{head[2]}, both in split {split}: one image written twice "
                              "under two names"))
    if count > len(names):
      records.append(_warning(DUPLICATE, head, digest, f"{count - len(names):,} more files in "
                              f"split {split} have the same bytes as {head[2]}; they are not "
                              f"named one by one (at most {MAX_NAMED} per content and split)"))
  return records, {k: v for k, v in counts.items() if v}


def _warning(reason: str, copy: Copy, digest: str, message: str) -> ErrorRecord:
  return ErrorRecord(source=copy[2], stage="validate", reason=reason, key=copy[1],
                     level="warning", message=f"{message} (SHA-256 {digest})")


def leakage(counts: Mapping[str, int], images: int) -> Leakage:
  """The manifest's `leakage` from the run's error counts (PREFIX keys) and its images."""
  checked = counts.get(IMAGES, 0)
  return Leakage(leaked_across_splits=counts.get(PREFIX + LEAKED, 0),
                 duplicate_content=counts.get(PREFIX + DUPLICATE, 0),
                 images_checked=checked, images_unchecked=max(0, images - checked))


def weighed(levels: Mapping[str, int], found: Leakage) -> Dict[str, int]:
  """Error counts by level as --max-error-rate and --strict weigh them: each extra copy counts
  as one rejected input (its image is written all the same)."""
  return dict(levels, copies=found.copies) if found.copies else dict(levels)

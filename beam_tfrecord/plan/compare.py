"""--append: the sources compared with the earlier version's catalog where the shard order is
sorted, so that only added and changed images go on to be read and encoded. Beam-free (the
sort's worker processes import it).

1. Before the sort, each shard file of the earlier version is checked once (check_file):
   its catalog partition (the digest and rows its version recorded, its columns:
   catalog.check_table) and the file itself (its stamp as recorded, else every record's
   range, CRCs and digest). The answer, a FileCheck per file, O(files), is what the sort and
   the writers use: a partition refused is not used (its images count as added and the
   append becomes a full version: cli/append), rows whose records do not check out are
   encoded again.
2. Each run of the sort (plan/runs.sort_run) reads the catalog rows of its partitions of the
   shard order (catalog_rows: a slice by hash of each partition whose ranges meet them) and
   compares its images with them (compare_run): an image with no row is added, one whose file
   stamp and annotation digest equal its row's is unchanged, any other is changed; a row no
   image has is removed. The run file then holds only the added and changed images and the
   removed rows (runs.write_changes); the plan gets, per earlier file, how many of its rows
   changed or went, and per base range how many images were added.
3. A writer keeps an earlier file whole when none of its rows changed, else rewrites it from
   its rows and the run files' changes (write/shard_writer.write_segment).

Largest element: one run's images and catalog rows (N / 64 of each locally). Memory: a
worker holds the catalog partitions its runs meet (CACHE of them, each one shard's rows).
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
import json
import marshal
import os
import stat
from typing import Dict, Iterable, List, Sequence, Tuple

from beam_tfrecord.plan.shard_plan import PARTITION_BITS, Bound, bound_of
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import catalog, paths, record_files

# rows of one earlier file whose records may fail their checks and still be named one by one
# (the FileCheck is a side input of the sort and the writers); past this, all are re-encoded
MAX_BAD_ROWS = 10_000


@dataclasses.dataclass(frozen=True)
class EarlierFile:
  """One shard file of the earlier version, as its manifest describes it."""
  index: int                       # its number in its split (shard_plan.Segment.previous)
  shard: str                       # the shard file's uri
  catalog: str                     # its catalog partition's uri ('' when it has none)
  digest: str                      # the partition's digest, rows and the shard file's stamp
  rows: int                        # as its version recorded them ('' and -1 where not)
  stamp: str
  span: Tuple[int, int]            # the hashes of its base ranges, inclusive
  file_format: str = record_files.TFRECORD  # its version's --file-format
  bytes: int = -1                  # its size as its version recorded it


@dataclasses.dataclass(frozen=True)
class FileCheck:
  """What the check of an earlier file found: whether its partition can be used, the file's
  stamp when checked (a writer that keeps it whole finds the same), and the rows whose
  records do not check out (or all of them)."""
  split: str
  index: int
  usable: bool
  stamp: str = ""
  bad: Tuple[int, ...] = ()
  all_bad: bool = False

  def is_bad(self, row: int) -> bool:
    return self.all_bad or row in self.bad


@dataclasses.dataclass(frozen=True)
class CompareSplit:
  """What a run compares one split's images with (picklable, O(files))."""
  bounds: Tuple[Bound, ...]
  files: Tuple[EarlierFile, ...]
  checks: Dict[int, FileCheck]
  reuse: bool                      # unchanged images keep their records (same label map)


def span_of(bounds: Sequence[Bound], first: int, end: int) -> Tuple[int, int]:
  """The hashes base ranges [first, end) of a split cut by `bounds` hold, inclusive."""
  lo = bounds[first - 1][0] if first > 0 else 0
  hi = bounds[end - 1][0] if end - 1 < len(bounds) else catalog.HASH_MAX
  return lo, hi


def partitions_of(span: Tuple[int, int]) -> Tuple[int, int]:
  """[first, last] partitions of the shard order a hash span meets."""
  shift = 64 - PARTITION_BITS
  return span[0] >> shift, span[1] >> shift


def base_range(bounds: Sequence[Bound], image: Bound) -> int:
  """The base range an image (hash, key, uri) falls in."""
  return bisect.bisect_right(bounds, image)


def check_file(split: str, f: EarlierFile) -> Tuple[FileCheck, List[ErrorRecord]]:
  """Check one earlier file (see the module's docstring). Deterministic: equal bytes give
  equal answers, so every run and writer that uses the answer agrees."""
  table = catalog.read_table(f.catalog, f.digest, f.rows, span=f.span)[0] \
      if f.catalog else None
  if table is None:
    return FileCheck(split, f.index, usable=False), [ErrorRecord(
        source=f.catalog or f.shard, stage="write", reason="earlier_index_damaged",
        key=f.shard.rsplit("/", 1)[-1], level="warning",
        message=f"the catalog partition {f.catalog} cannot be read or is not the one its "
        "version recorded; its shard's images are encoded again")]
  offsets = table.column("offset").to_pylist()
  lengths = table.column("length").to_pylist()
  end = max((o + n for o, n in zip(offsets, lengths)), default=0)
  stamp = catalog.file_stamp(f.shard)
  if _whole(f, end, stamp):
    return FileCheck(split, f.index, True, stamp), []
  bad: List[int] = []
  try:
    with record_files.EarlierShard(f.shard, f.file_format) as shard:
      # from its columns: an Entry a row held ~700 bytes of a 100k-row partition per process
      check = catalog.check_range
      for row, (key, uri, offset, length, records, sha) in enumerate(zip(
          *(table.column(n).to_pylist()
            for n in ("key", "uri", "offset", "length", "records", "sha")))):
        if length and check(shard, key, uri, offset, length, records, sha) is None:
          bad.append(row)
      all_bad = len(bad) > MAX_BAD_ROWS
  except (OSError, ValueError):  # ValueError: not a whole ArrayRecord file
    all_bad = True
  check = FileCheck(split, f.index, True, stamp, () if all_bad else tuple(bad), all_bad)
  damaged = table.num_rows if all_bad else len(bad)
  if not damaged:
    return check, []
  return check, [ErrorRecord(
      source=f.shard, stage="write", reason="earlier_shard_damaged",
      key=f.shard.rsplit("/", 1)[-1], level="warning",
      message=f"{damaged} image(s) of the earlier shard {f.shard} were not what its catalog "
      "says (framing, CRC or digest); they were encoded again")]


def check_task(task: Tuple[str, EarlierFile]) -> Tuple[FileCheck, List[ErrorRecord]]:
  """check_file of (split, file): a worker process's task."""
  return check_file(*task)


def _whole(f: EarlierFile, end: int, stamp: str) -> bool:
  """The earlier shard file may be used without reading its records: a regular file (not a
  link) of its recorded size, where its catalog's last record ends (TFRecord: `end` is a
  byte), and, locally, whose stamp is the one its version recorded (catalog.file_stamp). An
  object store's object never changes in place (a new generation), so its size says it."""
  size = end if f.file_format == record_files.TFRECORD else f.bytes
  try:
    if paths.is_remote(f.shard):
      return size >= 0 and paths.size_of(f.shard) == size
    st = os.lstat(f.shard)
  except OSError:
    return False
  return stat.S_ISREG(st.st_mode) and st.st_size == size and bool(f.stamp) and \
      stamp == f.stamp


# catalog partitions a worker keeps parsed, by (uri, stamp, digest): a run's partitions meet
# one or two of them, and the next run of the same worker the same ones
CACHE = 4
_tables: "collections.OrderedDict" = collections.OrderedDict()


def _table(f: EarlierFile):
  """(hashes, table) of a partition the check found usable (checked_table), parsed once per
  worker while its stamp stays the same."""
  key = (f.catalog, catalog.file_stamp(f.catalog), f.digest)
  if key[1] and key in _tables:
    _tables.move_to_end(key)
    return _tables[key]
  table = checked_table(f)
  value = (catalog.hashes_of(table), table)
  if key[1]:
    _tables[key] = value
    while len(_tables) > CACHE:
      _tables.popitem(last=False)
  return value


def checked_table(f: EarlierFile):
  """The table of a partition its check found usable (the digest compared again: the bytes
  are those checked). One that changed since fails the run: nothing is published."""
  table = catalog.read_table(f.catalog, f.digest, f.rows, checked=True)[0]
  if table is None:
    raise RuntimeError(f"the catalog partition {f.catalog} changed during the run")
  return table


# a row as compare_run needs it: (earlier file, row, stamp, digest, errors)
Row = Tuple[int, int, str, str, str]


def catalog_rows(context: CompareSplit, first: int, last: int) -> Dict[catalog.Identity, Row]:
  """The rows of the usable earlier partitions whose hashes fall in partitions [first, last]
  of the shard order, by identity. An identity two rows claim keeps the first (the other is
  removed: its file is rewritten without it)."""
  shift = 64 - PARTITION_BITS
  lo, hi = first << shift, (last + 1) << shift
  found: Dict[catalog.Identity, Row] = {}
  extra: List[Row] = []
  for f in context.files:
    check = context.checks.get(f.index)
    if check is None or not check.usable or f.span[1] < lo or f.span[0] >= hi:
      continue
    hashes, table = _table(f)
    a = int(hashes.searchsorted(lo, "left"))
    b = int(hashes.searchsorted(hi, "left")) if hi <= catalog.HASH_MAX else len(hashes)
    if a == b:
      continue
    part = table.slice(a, b - a)
    columns = [part.column(n).to_pylist() for n in ("key", "uri", "stamp", "digest", "errors")]
    for row, (key, uri, st, dg, errors) in enumerate(zip(*columns), a):
      value = (f.index, row, st, dg, errors)
      if found.setdefault((key, uri), value) is not value:
        extra.append(value)
  for value in extra:  # duplicates: removed rows under a key of their own
    found[("", f"\0{value[0]}:{value[1]}")] = value
  return found


def _sources(errors: str) -> set:
  try:
    return {e.get("source") for e in json.loads(errors)}
  except (ValueError, AttributeError):
    return set()


def compare_run(unique: Sequence[packed.Packed], rows: Dict[catalog.Identity, Row],
                context: CompareSplit) -> Tuple[List, Dict[int, int], Dict[int, int]]:
  """(changes, {earlier file: rows changed or removed}, {base range: images added}) of one
  split's images of a run (in shard order, one per file) against its catalog rows (consumed).
  changes: runs.Change tuples, in shard order, the removed rows last."""
  changes: List = []
  dirty: Dict[int, int] = {}
  added: Dict[int, int] = {}
  checks, reuse, bounds = context.checks, context.reuse, context.bounds
  stamp_of, digest_of, loads = catalog.stamp, catalog.digest_plain, marshal.loads
  for e in unique:
    row = rows.pop((e[packed.KEY], e[packed.URI]), None)
    if row is None:
      r = base_range(bounds, bound_of(e))
      added[r] = added.get(r, 0) + 1
      changes.append((e[packed.RECORDS], -1, r, e[packed.BLOB]))
      continue
    f, r, st, dg, errors = row
    if reuse and not checks[f].is_bad(r) and stamp_of(e[packed.URI]) == st and \
        digest_of(loads(e[packed.BLOB])) == dg and \
        (not errors or _sources(errors) == {e[packed.SOURCE]}):
      continue  # unchanged: its records stay where they are
    dirty[f] = dirty.get(f, 0) + 1
    changes.append((e[packed.RECORDS], f, r, e[packed.BLOB]))
  for f, r, _, _, _ in rows.values():
    dirty[f] = dirty.get(f, 0) + 1
    changes.append((0, f, r, b""))
  return changes, dirty, added


def earlier_files(split: str, bounds: Sequence[Bound],
                  segments: Sequence[Tuple[int, int]], shards: Sequence[str],
                  catalogs: Sequence[str], recorded: Sequence[Tuple[str, str, int]],
                  file_format: str = record_files.TFRECORD, sizes: Sequence[int] = ()
                  ) -> Tuple[EarlierFile, ...]:
  """The EarlierFiles of one split of the earlier version (plan/previous.Previous's)."""
  return tuple(EarlierFile(i, shard, catalog_uri, digest, rows, file_stamp,
                           span_of(bounds, first, end), file_format,
                           sizes[i] if i < len(sizes) else -1)
               for i, ((first, end), shard, catalog_uri, (file_stamp, digest, rows))
               in enumerate(zip(segments, shards, catalogs, recorded)))


def checks_by_split(checks: Iterable[FileCheck]) -> Dict[str, Dict[int, FileCheck]]:
  out: Dict[str, Dict[int, FileCheck]] = {}
  for check in checks:
    out.setdefault(check.split, {})[check.index] = check
  return out

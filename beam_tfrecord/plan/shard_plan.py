"""Shard maths: the shard order, partitions of it, and the plan cut from their counts. Pure.

Every image has a 64-bit place in the shard order (records/packed.identity_hash of its key).
The order is cut into PARTITIONS ranges by its top bits. One partition's images are sorted on
one worker (plan/transform.SortRuns: duplicates and overlaps found there, the sorted run
written to a file); the plan (make_plan) needs only each partition's counts per split, so its
size is O(splits x PARTITIONS) whatever the dataset size. A shard is a range of positions in
its split's order (ranks, or record positions with --records-per-shard): its writer reads the
runs of the partitions that range touches (plan/runs.py).
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import operator
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ErrorRecord

DEFAULT_SHARD_SIZE_MB = 150.0

# Partitions of the shard order. One partition is sorted in one worker: about N / 1024 images
# (100M images: ~100k entries, ~40 MB of annotations without masks); the plan holds 3 counts
# per (split, partition).
PARTITION_BITS = 10
PARTITIONS = 1 << PARTITION_BITS


# Partitions per run file on local runners: the partitions are sorted and written 16 at a
# time (64 spill files and 64 runs a split, not 1,024: per-file costs were ~0.5 s of the
# 20,000-image benchmark's 7 s); one a file elsewhere, where a partition is one group.
LOCAL_RUN_SPAN = 16


def partition_of(identity: int) -> int:
  return identity >> (64 - PARTITION_BITS)


def num_shards_for(count: int, total_bytes: int, num_shards: Optional[int],
                   shard_size_mb: Optional[float]) -> int:
  """How many shards a split gets: fixed, or enough to keep shards near shard_size_mb.

  Never fewer than 1, never more than there are examples (no empty shards).
  """
  if count <= 0:
    return 0
  if num_shards:
    wanted = num_shards
  else:
    target = (shard_size_mb or DEFAULT_SHARD_SIZE_MB) * 1024 * 1024
    wanted = math.ceil(total_bytes / target)
  return max(1, min(int(wanted), count))


def shard_lengths(count: int, num_shards: int) -> List[int]:
  """Examples per shard for rank-based cutting (what plan_split produces)."""
  return [((i + 1) * count) // num_shards - (i * count) // num_shards
          for i in range(num_shards)]


# --append: an earlier version's shard boundaries, kept across dataset
# versions so that an image keeps its shard. A bound is the place in the shard order (hash,
# key, uri) where a shard begins: shard i (i >= 1) holds the images from bound i - 1 of the
# split's bounds up to (not including) bound i. A split's bounds are O(shards).
Bound = Tuple[int, str, str]
# the plan's accumulator keeps, beside each (split, partition)'s counts, under the partition
# -(i + 1) the counts of bound i's partition that sort before bound i
BOUND_KEY_BASE = -1
# and, under (DIRTY, i), the rows of earlier file i that changed or went, under (ADDED, r) the
# images added in base range r (plan/compare): O(files + ranges)
DIRTY, ADDED = "dirty", "added"


def bound_of(entry: packed.Packed) -> Bound:
  return (entry[packed.HASH], entry[packed.KEY], entry[packed.URI])


def bound_key(i: int) -> int:
  return BOUND_KEY_BASE - i


def counts_below_bounds(split: str, entries: Sequence[packed.Packed],
                        bounds: Sequence[Bound]) -> Dict[Tuple[str, int], List[int]]:
  """{(split, bound_key(i)): [images, records, bytes]} of the entries (one run's images of one
  split, in shard order) in bound i's partition that sort before bound i, for the bounds whose
  partitions the entries cover. Partitions the entries do not reach count nothing (0)."""
  if not entries or not bounds:
    return {}
  keys = [bound_of(e) for e in entries]
  parts = [partition_of(e[packed.HASH]) for e in entries]
  first, last = parts[0], parts[-1]
  out: Dict[Tuple[str, int], List[int]] = {}
  for i, bound in enumerate(bounds):
    p = partition_of(bound[0])
    if p < first or p > last:
      continue
    lo = bisect.bisect_left(parts, p)
    hi = bisect.bisect_left(keys, bound, lo, bisect.bisect_right(parts, p))
    if hi > lo:
      below = entries[lo:hi]
      out[(split, bound_key(i))] = [len(below), sum(e[packed.RECORDS] for e in below),
                                    sum(e[packed.SIZE] for e in below)]
  return out


# (images, records, image bytes) of one split in one partition
Counts = Tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class SplitPlan:
  """One split's shards as ranges of positions in its order.

  A position counts images, or records with --records-per-shard (by_records). Shard i holds
  the images whose position is in [starts[i], starts[i+1]) (the last: up to the end);
  offsets[p] is the position of partition p's first image (PARTITIONS + 1 entries);
  partitions: those with images (with --records-per-shard, some may hold images of no record).
  records: the records each shard is planned to hold, where that is known before writing
  (every image one record), else empty.
  """
  split: str
  num_shards: int
  count: int
  total_bytes: int
  total_records: int
  by_records: bool
  offsets: Tuple[int, ...]
  starts: Tuple[int, ...]
  partitions: Tuple[int, ...] = ()
  records: Tuple[int, ...] = ()
  span: int = 1  # partitions per run file
  bounds: Tuple[Bound, ...] = ()  # --append: where shards 1.. begin (else: not known yet)
  # --append: the version's shard files, each a Segment over the base ranges (the ranges the
  # bounds cut; starts has one per range); empty: shard i is base range i
  segments: Tuple["Segment", ...] = ()

  def shard_range(self, shard: int) -> Tuple[int, int]:
    """[lo, hi) of the positions shard `shard` holds (the last: every position to the end,
    images of no record at the very end included)."""
    if self.segments:
      return self.ranges_range(self.segments[shard].first, self.segments[shard].end)
    hi = self.starts[shard + 1] if shard + 1 < self.num_shards else self.offsets[-1] + 1
    return self.starts[shard], hi

  def ranges_range(self, first: int, end: int) -> Tuple[int, int]:
    """[lo, hi) of the positions of base ranges [first, end)."""
    hi = self.starts[end] if end < len(self.starts) else self.offsets[-1] + 1
    return self.starts[first], hi

  def runs_of(self, shard: int) -> List[Tuple[int, int]]:
    """(run file, position of its first image) of every run holding partitions with images
    whose positions may fall in shard `shard`'s range, in order (run r holds partitions
    r * span to (r + 1) * span - 1)."""
    lo, hi = self.shard_range(shard)
    out: List[Tuple[int, int]] = []
    for p in self.partitions[bisect.bisect_left(self.partitions,
                                                self._first_partition_at(lo)):]:
      if self.offsets[p] >= hi:
        break
      run = p // self.span
      if not out or out[-1][0] != run:
        out.append((run, self.offsets[run * self.span]))
    return out

  def _first_partition_at(self, position: int) -> int:
    """The first partition that may hold `position`: the last whose first image is at or
    before it (earlier ones may end there with images of no record)."""
    return max(0, bisect.bisect_left(self.offsets, position) - 1)


def plan_split(split: str, counts: Mapping[int, Counts], num_shards: Optional[int],
               shard_size_mb: Optional[float],
               records_per_shard: Optional[int] = None, span: int = 1,
               bounds: Optional[Sequence[Bound]] = None,
               below: Optional[Mapping[int, Counts]] = None) -> SplitPlan:
  """Cut one split, given each partition's (images, records, bytes), into shards.

  With `bounds` (an earlier version's, --append), shard i begins at bound i - 1: its start is
  the position of its bound's partition plus the images (records) there before the bound
  (`below`, by bound index); shards may then be empty.

  By --num-shards / --shard-size-mb: by rank, shard sizes differ by at most one image.
  By records_per_shard: every N records of the order begin a shard; an image goes with its
  first record, so with one record per image every file but the last holds exactly N.
  """
  below = below or {}
  count = sum(c[0] for c in counts.values())
  total_records = sum(c[1] for c in counts.values())
  total_bytes = sum(c[2] for c in counts.values())
  unit = 1 if records_per_shard else 0  # index into Counts of what a position counts
  offsets = [0] * (PARTITIONS + 1)
  for p in range(PARTITIONS):
    offsets[p + 1] = offsets[p] + counts.get(p, (0, 0, 0))[unit]
  if bounds is not None:  # an earlier plan's boundaries: each starts where its image would be
    n = len(bounds) + 1
    starts = (0,) + tuple(offsets[partition_of(b[0])] + below.get(i, (0, 0, 0))[unit]
                          for i, b in enumerate(bounds))
    records = ()
  elif records_per_shard:
    # images of no record (per-object schemas) still need a shard to be accounted for
    n = max(1, math.ceil(total_records / records_per_shard)) if count else 0
    starts = tuple(i * records_per_shard for i in range(n))
    records = (tuple(min(records_per_shard, total_records - s) for s in starts)
               if total_records == count else ())
  else:
    n = num_shards_for(count, total_bytes, num_shards, shard_size_mb)
    starts = tuple((i * count) // n for i in range(n))
    records = tuple(shard_lengths(count, n)) if total_records == count else ()
  return SplitPlan(split=split, num_shards=n, count=count, total_bytes=total_bytes,
                   total_records=total_records, by_records=bool(records_per_shard),
                   offsets=tuple(offsets), starts=starts,
                   partitions=tuple(sorted(p for p, c in counts.items() if c[0])),
                   records=records, span=span, bounds=tuple(bounds or ()))


def counts_of(images: Iterable[Tuple[str, int, int]]) -> Dict[int, Counts]:
  """{partition: (images, records, bytes)} of one split's (key, size, records) images, one per
  file: what the sorted runs report (for tests and tools; the pipeline counts per partition)."""
  counts: Dict[int, List[int]] = {}
  for key, size, records in images:
    c = counts.setdefault(partition_of(packed.identity_hash(key)), [0, 0, 0])
    c[0] += 1
    c[1] += records
    c[2] += size
  return {p: tuple(c) for p, c in counts.items()}


@dataclasses.dataclass(frozen=True)
class ShardPlan:
  """The plan of a whole run: a SplitPlan per split (splits with no image have none).
  previous: the earlier plan its splits kept (--append), by split; fallback: why the
  earlier plan was not kept ('' when it was, or there was none)."""
  splits: Dict[str, SplitPlan]
  previous: Dict[str, PreviousSplit] = dataclasses.field(default_factory=dict)
  fallback: str = ""

  def tasks(self) -> List[Tuple[str, int]]:
    return [(split, shard) for split, plan in sorted(self.splits.items())
            for shard in range(plan.num_shards)]


# The plan's accumulator: {(split, partition): [images, records, bytes]}
PlanCounts = Dict[Tuple[str, int], List[int]]


def add_counts(acc: PlanCounts, key: Tuple[str, int], counts: Sequence[int]) -> PlanCounts:
  old = acc.get(key)
  acc[key] = list(counts) if old is None else [a + b for a, b in zip(old, counts)]
  return acc


def _partition_of_entry(entry: packed.Packed) -> int:
  return entry[packed.HASH] >> (64 - PARTITION_BITS)


_RECORDS_OF, _SIZE_OF = operator.itemgetter(packed.RECORDS), operator.itemgetter(packed.SIZE)


def partition_counts(split: str, entries: Sequence[packed.Packed]) -> PlanCounts:
  """{(split, partition): [images, records, bytes]} of one split's images in shard order (a
  partition's are neighbours): a sum per partition, where add_counts per image cost ~1.5 us
  an image."""
  counts: PlanCounts = {}
  for partition, group in itertools.groupby(entries, key=_partition_of_entry):
    group = list(group)
    add_counts(counts, (split, partition),
               (len(group), sum(map(_RECORDS_OF, group)), sum(map(_SIZE_OF, group))))
  return counts


@dataclasses.dataclass(frozen=True)
class Segment:
  """--append: one shard file of a version, over base ranges [first, end) of its split.
  `previous` >= 0: the earlier version's shard file of that number, whose images are those
  its index lists (kept, or rewritten when one changed or went); -1: a new delta shard, the
  images of its ranges that no earlier shard lists (added since)."""
  first: int
  end: int
  previous: int = -1
  delta: bool = False  # a delta shard (new, or kept from a version where it was one)
  # the run files' changes it takes: an earlier file's rows changed or removed, a new delta
  # shard's images added in its ranges (plan/compare)
  changes: int = 0


@dataclasses.dataclass(frozen=True)
class PreviousSplit:
  """One split of an earlier output's plan (its manifest's `shard_plan`): where its shards
  begin, and the sizes (positions) its shards had when that plan was first made. segments:
  (first, end) base ranges of each of its shard files, in order ((i, i + 1) for shard i
  when it had no delta shards)."""
  bounds: Tuple[Bound, ...]
  planned: Tuple[int, ...]
  segments: Tuple[Tuple[int, int], ...] = ()
  images: int = 0  # images (written or rejected) of the split in that output
  deltas: Tuple[bool, ...] = ()  # which of its shard files are delta shards (with segments)

  def segments_or_base(self) -> Tuple[Tuple[int, int], ...]:
    return self.segments or tuple((i, i + 1) for i in range(len(self.bounds) + 1))


def delta_target(planned: Sequence[int]) -> int:
  """The images (positions) a new delta shard is sized for: the median of the sizes the
  split's shards were planned for (1 when none)."""
  return sorted(planned)[len(planned) // 2] if planned else 1


def delta_groups(added: Sequence[int], target: int) -> List[Tuple[int, int]]:
  """--append: the base ranges [first, end) each new delta shard covers, given the images
  added in each range (the sort counts them: plan/compare). Every range is covered; a group
  ends before the range that would take it past `target` images, so a delta shard holds more
  only when one range alone does. Pure."""
  groups: List[Tuple[int, int]] = []
  start = held = 0
  for r, n in enumerate(added):
    if held and held + n > target:
      groups.append((start, r))
      start, held = r, 0
    held += n
  groups.append((start, len(added)))
  return groups


# a shard that would hold more than this times its planned size makes the plan afresh
REBALANCE_FACTOR = 2


def make_plan(counts: PlanCounts, num_shards: Optional[int], shard_size_mb: Optional[float],
              records_per_shard: Optional[int] = None, span: int = 1,
              previous: Optional[Mapping[str, PreviousSplit]] = None,
              append: bool = False) -> ShardPlan:
  """The run's plan from its counts. With `previous` (--append), a split the earlier plan
  has keeps its bounds; if that would make any shard more than REBALANCE_FACTOR times its
  planned size, every split is planned afresh and `fallback` says why. With `append`, a kept
  split's shards are its earlier shard files (segments) plus new delta shards
  (delta_groups); base shards never grow, so there is no rebalance."""
  by_split: Dict[str, Dict[int, Counts]] = {}
  below: Dict[str, Dict[int, Counts]] = {}
  changes: Dict[str, Dict[Tuple[str, int], int]] = {}
  for (split, p), c in counts.items():
    if isinstance(p, tuple):  # (DIRTY, file) or (ADDED, range)
      changes.setdefault(split, {})[tuple(p)] = c[0]
    elif p <= BOUND_KEY_BASE:
      below.setdefault(split, {})[BOUND_KEY_BASE - p] = tuple(c)
    else:
      by_split.setdefault(split, {})[p] = tuple(c)
  fresh = {split: plan_split(split, parts, num_shards, shard_size_mb, records_per_shard, span)
           for split, parts in sorted(by_split.items()) if any(c[0] for c in parts.values())}
  if not previous:
    return ShardPlan(splits=fresh)
  kept: Dict[str, SplitPlan] = {}
  for split, plan in fresh.items():
    before = previous.get(split)
    if before is None:
      kept[split] = plan
      continue
    kept[split] = plan_split(split, by_split[split], None, None, records_per_shard, span,
                             bounds=before.bounds, below=below.get(split, {}))
    if append:
      old = before.segments_or_base()
      ranges = len(before.bounds) + 1
      found = changes.get(split, {})
      added = [found.get((ADDED, r), 0) for r in range(ranges)]
      new = delta_groups(added, delta_target(before.planned))
      # a delta shard stays one until a full version: compaction counts them all
      deltas = before.deltas or (False,) * len(old)
      segments = tuple(Segment(a, b, i, deltas[i], found.get((DIRTY, i), 0))
                       for i, (a, b) in enumerate(old)) + tuple(
          Segment(a, b, delta=True, changes=sum(added[a:b])) for a, b in new)
      kept[split] = dataclasses.replace(kept[split], segments=segments,
                                        num_shards=len(segments), records=())
      continue
    grown = grown_shard(kept[split], before.planned)
    if grown:
      return ShardPlan(splits=fresh, fallback=f"split {split!r}: {grown}; the shards are "
                       "planned afresh (a rebalance)")
  return ShardPlan(splits=kept, previous=dict(previous))


def sizes_of(plan: SplitPlan) -> List[int]:
  """Positions (images, or records) each shard of a plan holds."""
  end = plan.offsets[-1]
  return [(plan.starts[i + 1] if i + 1 < plan.num_shards else end) - plan.starts[i]
          for i in range(plan.num_shards)]


def grown_shard(plan: SplitPlan, planned: Sequence[int]) -> str:
  """'' or what says that a shard outgrew REBALANCE_FACTOR times its planned size."""
  unit = "records" if plan.by_records else "images"
  for i, (now, then) in enumerate(zip(sizes_of(plan), planned)):
    if now > REBALANCE_FACTOR * max(then, 1):
      return f"shard {i} would hold {now} {unit}, planned for {then}"
  return ""


# Where an annotation sorts in its partition: by split, then the shard order (hash, key, uri),
# then which of a file's annotations wins (source, source id: the smallest). An itemgetter:
# a Python key function cost a fifth more of the sort.
order_key = operator.itemgetter(packed.SPLIT, packed.HASH, packed.KEY, packed.URI,
                                packed.SOURCE, packed.SOURCE_ID)
_SPLIT_OF = operator.itemgetter(packed.SPLIT)


def overlap_warning(uri: str, where: Iterable[Tuple[str, str, str]]) -> ErrorRecord:
  """The warning for a file the source puts in several splits, given (split, source, key) of
  each (written to each, as the source asks: Ultralytics' coco128.yaml names one folder for
  train and val)."""
  where = sorted(where)
  return ErrorRecord(
      source=where[0][1], stage="parse", reason="in_two_splits", key=where[0][2],
      level="warning", message=f"{uri} is in splits {', '.join(s for s, _, _ in where)}: "
      "written to each, as the source lists it (an evaluation on one of them sees images "
      "the model trained on)")


def sort_partition(entries: Iterable[packed.Packed]
                   ) -> Tuple[Dict[str, List[packed.Packed]], List[ErrorRecord]]:
  """One partition's annotations -> ({split: its images in shard order, one per file}, reports).

  A file annotated more than once in a split is one image there (the first annotation in
  order_key's order; the others are reported, `duplicate_image`); a file in several splits
  is written to each (one `in_two_splits` warning). Its annotations share a key, hence a
  partition, so finding them needs no grouping of its own."""
  by_split: Dict[str, List[packed.Packed]] = {}
  errors: List[ErrorRecord] = []
  uri_at = packed.URI
  for split, group in itertools.groupby(sorted(entries, key=order_key), key=_SPLIT_OF):
    unique: List[packed.Packed] = []
    last = None
    for entry in group:
      if last is not None and last[uri_at] == entry[uri_at]:
        uri = entry[uri_at]
        errors.append(ErrorRecord(
            source=entry[packed.SOURCE], stage="parse", reason="duplicate_image",
            key=entry[packed.KEY], level="warning",
            message=f"{uri} is annotated again (source id {entry[packed.SOURCE_ID]!r}); the "
            f"annotation from {last[packed.SOURCE]} (source id {last[packed.SOURCE_ID]!r}) "
            "is used"))
        continue
      last = entry
      unique.append(entry)
    by_split[split] = unique
  if len(by_split) > 1:  # files in several splits: sets of each split's files first (most
    # partitions have none, and a dict of every file's entries cost ~1 us an image)
    files = [{e[uri_at] for e in unique} for unique in by_split.values()]
    shared = set().union(*(a & b for i, a in enumerate(files) for b in files[i + 1:]))
    if shared:
      splits_of: Dict[str, List[packed.Packed]] = {}
      for unique in by_split.values():
        for entry in unique:
          if entry[uri_at] in shared:
            splits_of.setdefault(entry[uri_at], []).append(entry)
      for uri, where in sorted(splits_of.items()):
        errors.append(overlap_warning(uri, [(e[packed.SPLIT], e[packed.SOURCE],
                                             e[packed.KEY]) for e in where]))
  return by_split, errors

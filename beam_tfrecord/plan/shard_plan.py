"""Shard maths: how many shards a split gets and which keys each holds. Pure.

In: per image, (key, size, records) entries; out: a ShardPlan of boundaries per split, which
the plan stage (plan/transform.py) computes once and the writer routes every image by.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from beam_tfrecord.records.model import ErrorRecord

DEFAULT_SHARD_SIZE_MB = 150.0


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


@dataclasses.dataclass(frozen=True)
class SplitPlan:
  """Where each key of a split goes: shard i holds keys in [boundaries[i], boundaries[i+1]).

  Keys are anything orderable: the pipeline uses (image key, uri) pairs, so that two images
  with the same relative name under different roots are two images (in key order, the uri
  only breaking ties: with unique keys the ranks, hence the shards, are those of the keys).
  records: the records each shard is planned to hold (before any is rejected while writing).
  """
  split: str
  num_shards: int
  count: int
  total_bytes: int
  boundaries: Tuple[Any, ...]
  records: Tuple[int, ...] = ()

  def shard_of(self, key: Any) -> int:
    return max(0, bisect.bisect_right(self.boundaries, key) - 1)


def _fill_boundaries(keys: Sequence[Any], weights: Mapping[Any, int],
                     records_per_shard: int) -> Tuple[Any, ...]:
  """Cut sorted keys into shards of at most records_per_shard records each, in key order.
  An image's records never straddle two shards (one image with more records than the limit
  gets a shard of its own)."""
  boundaries: List[Any] = []
  fill = 0
  for key in keys:
    if not boundaries or (fill and fill + weights[key] > records_per_shard):
      boundaries.append(key)
      fill = 0
    fill += weights[key]
  return tuple(boundaries)


def plan_split(split: str, keys_and_sizes: Sequence[Tuple], num_shards: Optional[int],
               shard_size_mb: Optional[float],
               records_per_shard: Optional[int] = None) -> SplitPlan:
  """Cut the sorted keys of one split into shards. Items are (key, size) or (key, size,
  records), records being what the schema writes for that image (default 1).

  By --num-shards / --shard-size-mb: by rank, shard sizes differ by at most one image.
  By records_per_shard: filled in key order up to that many records.
  """
  weights: Dict[Any, int] = {}
  for key, _, *records in keys_and_sizes:
    weights[key] = records[0] if records else 1
  keys = sorted(weights)
  total = sum(item[1] or 0 for item in keys_and_sizes)
  if records_per_shard and keys:
    boundaries = _fill_boundaries(keys, weights, records_per_shard)
  else:
    n = num_shards_for(len(keys), total, num_shards, shard_size_mb)
    boundaries = tuple(keys[(i * len(keys)) // n] for i in range(n))
  records = [0] * len(boundaries)
  for key in keys:
    records[max(0, bisect.bisect_right(boundaries, key) - 1)] += weights[key]
  return SplitPlan(split=split, num_shards=len(boundaries), count=len(keys), total_bytes=total,
                   boundaries=boundaries, records=tuple(records))


# One image file as the planner sees it: (source, source_id, split, key, size, copies,
# records). The first four fields order the annotations of one file: the smallest one is
# written; records is what the schema writes for it (--records-per-shard).
PlanEntry = Tuple[str, str, str, str, int, int, int]


@dataclasses.dataclass(frozen=True)
class ShardPlan:
  """The plan of a whole run: per split, and where each file annotated twice is written.

  An image is a (file, split): a file the source puts in two splits is written to each
  (overlaps, one warning per file); annotated twice in one split, it is written once.
  duplicates: {(uri, split): (split, key)} of the annotation that wins for a file annotated
  more than once in a split; the others are routed to the same shard, where the writer
  reports them.
  overlaps: {uri: ((split, source, key), ...)} of each file in more than one split.
  """
  splits: Dict[str, SplitPlan]
  duplicates: Dict[Tuple[str, str], Tuple[str, str]]
  overlaps: Dict[str, Tuple[Tuple[str, str, str], ...]] = dataclasses.field(default_factory=dict)

  def route(self, split: str, key: str, uri: str) -> Tuple[str, int]:
    """(split, shard) whose writer sees this annotation."""
    split, key = self.duplicates.get((uri, split), (split, key))
    return split, self.splits[split].shard_of((key, uri))


# The accumulator of the plan: {(uri, split): winning entry}.
PlanEntries = Dict[Tuple[str, str], PlanEntry]


def add_plan_entry(acc: PlanEntries, uri: str, entry: PlanEntry) -> PlanEntries:
  """Fold one annotation of `uri` into {(uri, split): winning entry} (the smallest, with a
  count): the same file in two splits is two images, twice in one split one image."""
  ident = (uri, entry[2])
  old = acc.get(ident)
  if old is None:
    acc[ident] = entry
  else:
    best = old if old[:4] <= entry[:4] else entry
    acc[ident] = best[:5] + (old[5] + entry[5],) + best[6:]
  return acc


def make_plan(entries: PlanEntries, num_shards: Optional[int],
              shard_size_mb: Optional[float],
              records_per_shard: Optional[int] = None) -> ShardPlan:
  """Rank the winning (key, uri) of each split into shards (plan_split)."""
  by_split: Dict[str, List[Tuple[Tuple[str, str], int, int]]] = {}
  duplicates: Dict[Tuple[str, str], Tuple[str, str]] = {}
  in_splits: Dict[str, List[Tuple[str, str, str]]] = {}
  for (uri, split), (source, _, _, key, size, copies, records) in entries.items():
    by_split.setdefault(split, []).append(((key, uri), size, records))
    if copies > 1:
      duplicates[(uri, split)] = (split, key)
    in_splits.setdefault(uri, []).append((split, source, key))
  return ShardPlan(
      splits={split: plan_split(split, items, num_shards, shard_size_mb, records_per_shard)
              for split, items in sorted(by_split.items())},
      duplicates=duplicates,
      overlaps={uri: tuple(sorted(where)) for uri, where in sorted(in_splits.items())
                if len(where) > 1})


def overlap_warnings(plan: ShardPlan) -> List[ErrorRecord]:
  """One warning per file that the source puts in several splits (written to each, as the
  source asks: Ultralytics' coco128.yaml names one folder for train and val)."""
  return [ErrorRecord(
      source=where[0][1], stage="parse", reason="in_two_splits", key=where[0][2],
      level="warning", message=f"{uri} is in splits {', '.join(s for s, _, _ in where)}: "
      "written to each, as the source lists it (an evaluation on one of them sees images "
      "the model trained on)") for uri, where in sorted(plan.overlaps.items())]


def shard_lengths(count: int, num_shards: int) -> List[int]:
  """Examples per shard for rank-based cutting (what plan_split produces)."""
  return [((i + 1) * count) // num_shards - (i * count) // num_shards
          for i in range(num_shards)]

"""Shard counts, shard assignment, split assignment and file names. Pure functions."""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

DEFAULT_SHARD_SIZE_MB = 150.0
# Split names become file names (SPLIT-00000-of-00004.tfrecord): no separators, no leading dot.
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_split_name(name: str) -> str:
  """The name itself when it is usable as a split (file-name safe), else ValueError."""
  if not isinstance(name, str) or not _SPLIT_NAME.fullmatch(name):
    raise ValueError(f"split name {name!r} must be letters, digits, '_', '.', '-' "
                     "and not start with '.' or '-'")
  return name


def parse_split_fractions(text: str) -> Dict[str, float]:
  """'train=0.8,val=0.1,test=0.1' -> {'train': 0.8, ...}; fractions must sum to 1."""
  fractions: Dict[str, float] = {}
  for part in text.split(","):
    name, sep, value = part.partition("=")
    name = name.strip()
    if not sep or not name:
      raise ValueError(f"bad split {part!r}: expected NAME=FRACTION")
    check_split_name(name)
    if name in fractions:
      raise ValueError(f"split {name!r} given twice")
    try:
      fraction = float(value)
    except ValueError:
      raise ValueError(f"bad fraction {value!r} for split {name!r}") from None
    if not 0.0 <= fraction <= 1.0:
      raise ValueError(f"fraction for split {name!r} must be within [0, 1], got {fraction}")
    fractions[name] = fraction
  total = sum(fractions.values())
  if abs(total - 1.0) > 1e-6:
    raise ValueError(f"split fractions must sum to 1, got {total:g}")
  return fractions


def hash_unit(key: str) -> float:
  """A deterministic, uniform number in [0, 1) from a key (same on every machine)."""
  digest = hashlib.sha256(key.encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2.0**64


def split_for_key(key: str, fractions: Mapping[str, float]) -> str:
  """Assign a key to a split by its hash; stable across runs, runners and machines."""
  point = hash_unit(key)
  cumulative = 0.0
  names = list(fractions)
  for name in names:
    cumulative += fractions[name]
    if point < cumulative:
      return name
  return names[-1]  # float rounding at the top end


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
  """
  split: str
  num_shards: int
  count: int
  total_bytes: int
  boundaries: Tuple[Any, ...]

  def shard_of(self, key: Any) -> int:
    return max(0, bisect.bisect_right(self.boundaries, key) - 1)


def plan_split(split: str, keys_and_sizes: Sequence[Tuple[Any, int]],
               num_shards: Optional[int], shard_size_mb: Optional[float]) -> SplitPlan:
  """Cut the sorted keys of one split into shards by rank: sizes differ by at most one."""
  keys = sorted({key for key, _ in keys_and_sizes})
  total = sum(size or 0 for _, size in keys_and_sizes)
  n = num_shards_for(len(keys), total, num_shards, shard_size_mb)
  boundaries = tuple(keys[(i * len(keys)) // n] for i in range(n))
  return SplitPlan(split=split, num_shards=n, count=len(keys), total_bytes=total,
                   boundaries=boundaries)


# One image file as the planner sees it: (source, source_id, split, key, size, copies).
# The first four fields order the annotations of one file: the smallest one is written.
PlanEntry = Tuple[str, str, str, str, int, int]


@dataclasses.dataclass(frozen=True)
class ShardPlan:
  """The plan of a whole run: per split, and where each file annotated twice is written.

  duplicates: {uri: (split, key)} of the annotation that wins for a file annotated more than
  once; the others are routed to the same shard, where the writer reports them.
  """
  splits: Dict[str, SplitPlan]
  duplicates: Dict[str, Tuple[str, str]]

  def route(self, split: str, key: str, uri: str) -> Tuple[str, int]:
    """(split, shard) whose writer sees this annotation."""
    split, key = self.duplicates.get(uri, (split, key))
    return split, self.splits[split].shard_of((key, uri))


def add_plan_entry(acc: Dict[str, PlanEntry], uri: str, entry: PlanEntry) -> Dict[str, PlanEntry]:
  """Fold one annotation of `uri` into {uri: winning entry} (the smallest, with a count)."""
  old = acc.get(uri)
  if old is None:
    acc[uri] = entry
  else:
    best = old if old[:4] <= entry[:4] else entry
    acc[uri] = best[:5] + (old[5] + entry[5],)
  return acc


def make_plan(entries: Mapping[str, PlanEntry], num_shards: Optional[int],
              shard_size_mb: Optional[float]) -> ShardPlan:
  """Rank the winning (key, uri) of each split into shards (plan_split)."""
  by_split: Dict[str, List[Tuple[Tuple[str, str], int]]] = {}
  duplicates: Dict[str, Tuple[str, str]] = {}
  for uri, (_, _, split, key, size, copies) in entries.items():
    by_split.setdefault(split, []).append(((key, uri), size))
    if copies > 1:
      duplicates[uri] = (split, key)
  return ShardPlan(
      splits={split: plan_split(split, items, num_shards, shard_size_mb)
              for split, items in sorted(by_split.items())},
      duplicates=duplicates)


def shard_name(split: str, index: int, num_shards: int, suffix: str = ".tfrecord") -> str:
  """TFDS-style name: train-00003-of-00008.tfrecord (0-based)."""
  return f"{split}-{index:05d}-of-{num_shards:05d}{suffix}"


def shard_lengths(count: int, num_shards: int) -> List[int]:
  """Examples per shard for rank-based cutting (what plan_split produces)."""
  return [((i + 1) * count) // num_shards - (i * count) // num_shards
          for i in range(num_shards)]

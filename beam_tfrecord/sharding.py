"""Shard counts, shard assignment, split assignment and file names. Pure functions."""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
import re
import string
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from beam_tfrecord import card, output
from beam_tfrecord.errors import UsageError

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
    acc[uri] = best[:5] + (old[5] + entry[5],) + best[6:]
  return acc


def make_plan(entries: Mapping[str, PlanEntry], num_shards: Optional[int],
              shard_size_mb: Optional[float],
              records_per_shard: Optional[int] = None) -> ShardPlan:
  """Rank the winning (key, uri) of each split into shards (plan_split)."""
  by_split: Dict[str, List[Tuple[Tuple[str, str], int, int]]] = {}
  duplicates: Dict[str, Tuple[str, str]] = {}
  for uri, (_, _, split, key, size, copies, records) in entries.items():
    by_split.setdefault(split, []).append(((key, uri), size, records))
    if copies > 1:
      duplicates[uri] = (split, key)
  return ShardPlan(
      splits={split: plan_split(split, items, num_shards, shard_size_mb, records_per_shard)
              for split, items in sorted(by_split.items())},
      duplicates=duplicates)


def shard_name(split: str, index: int, num_shards: int, suffix: str = ".tfrecord") -> str:
  """TFDS-style name: train-00003-of-00008.tfrecord (0-based)."""
  return f"{split}-{index:05d}-of-{num_shards:05d}{suffix}"


DEFAULT_SHARD_NAME_TEMPLATE = "{split}-{index:05d}-of-{num_shards:05d}.tfrecord"
TEMPLATE_FIELDS = ("split", "index", "num_shards", "count")


def template_fields(template: str) -> Set[str]:
  """The fields a --shard-name-template uses; UsageError when it cannot name files."""
  try:
    parsed = list(string.Formatter().parse(template))
  except ValueError as e:
    raise UsageError(f"--shard-name-template {template!r}: {e}") from None
  fields = set()
  for _, field, spec, conversion in parsed:
    if field is None:
      continue
    if field not in TEMPLATE_FIELDS:
      raise UsageError(f"--shard-name-template {template!r}: unknown field {{{field}}}; the "
                       f"fields are {', '.join('{%s}' % f for f in TEMPLATE_FIELDS)}")
    fields.add(field)
  try:
    sample = format_shard_name(template, "train", 1, 2, 3)
  except (ValueError, TypeError) as e:
    raise UsageError(f"--shard-name-template {template!r}: {e}") from None
  if "/" in sample or "\\" in sample or sample.startswith(".") or not sample.strip():
    raise UsageError(f"--shard-name-template {template!r} must give plain file names (no "
                     "directories, not starting with '.'), e.g. "
                     f"{DEFAULT_SHARD_NAME_TEMPLATE!r}")
  return fields


def format_shard_name(template: str, split: str, index: int, num_shards: int,
                      count: int) -> str:
  return template.format(split=split, index=index, num_shards=num_shards, count=count)


def check_template(template: str, splits: Optional[Set[str]], num_shards: Optional[int]) -> None:
  """Build-time half of the clash check: UsageError when two shards would certainly (or, with
  splits unknown until the data is read, possibly) get one name. {count} never tells shards
  apart: it is only known once a shard is written."""
  fields = template_fields(template)
  if "index" not in fields and num_shards != 1:
    raise UsageError(f"--shard-name-template {template!r} has no {{index}}: the shards of a "
                     "split would share one name (only --num-shards 1 allows that)")
  if "split" not in fields and (splits is None or len(splits) > 1):
    known = f"the splits {sorted(splits)}" if splits else "splits found in the data"
    raise UsageError(f"--shard-name-template {template!r} has no {{split}}: {known} would "
                     "give shards of the same name")


# Names the run directory holds besides shards (and the error report): a shard may not take
# one of them, since finalize writes them after the shards and would replace it.
RESERVED_NAMES = (output.MANIFEST, output.LABEL_MAP, output.LABELS_TXT, card.NAME)
_ERROR_FILE = re.compile(r"^errors-\d{5}-of-\d{5}\.jsonl$")
MAX_ENUMERATED_SHARDS = 256  # check_names enumerates names up to this many shards per split


def reserved(name: str) -> bool:
  return name in RESERVED_NAMES or bool(_ERROR_FILE.match(name))


def check_names(template: str, splits: Optional[Set[str]], num_shards: Optional[int]) -> None:
  """Build-time check by enumeration, when the splits and --num-shards are known and the
  template has no {count}: UsageError when two shards could get one name (a split gets at
  most --num-shards shards, fewer when it has fewer images) or a shard a reserved name.
  Otherwise the plan step checks the real names before anything is written (shard_names)."""
  fields = template_fields(template)
  if not splits or not num_shards or "count" in fields or num_shards > MAX_ENUMERATED_SHARDS:
    return
  owners: Dict[str, str] = {}
  for split in sorted(splits):
    mine: Set[str] = set()
    for n in range(1, num_shards + 1):
      names = [format_shard_name(template, split, i, n, 0) for i in range(n)]
      if len(set(names)) != n:
        raise UsageError(f"--shard-name-template {template!r} gives two shards of split "
                         f"{split!r} the same name with {n} shards")
      mine.update(names)
      if "num_shards" not in fields:
        mine = set(format_shard_name(template, split, i, num_shards, 0)
                   for i in range(num_shards))
        break
    for name in sorted(mine):
      if reserved(name):
        raise UsageError(f"--shard-name-template {template!r} names a shard {name!r}, a file "
                         "of the run's own")
      if name in owners:
        raise UsageError(f"--shard-name-template {template!r} can give shards of splits "
                         f"{owners[name]!r} and {split!r} the same name {name!r}")
      owners[name] = split


def shard_names(plans: Sequence[SplitPlan], template: str) -> Dict[Tuple[str, int], str]:
  """{(split, index): file name} with the planned record counts; ValueError naming the
  clashes when two shards get the same name (checked before anything is written)."""
  names: Dict[Tuple[str, int], str] = {}
  owners: Dict[str, Tuple[str, int]] = {}
  clashes = []
  for plan in sorted(plans, key=lambda p: p.split):
    for index in range(plan.num_shards):
      name = format_shard_name(template, plan.split, index, plan.num_shards,
                               plan.records[index] if plan.records else 0)
      if reserved(name):
        clashes.append(f"{name!r} for shard {(plan.split, index)}, a file of the run's own")
      if name in owners:
        clashes.append(f"{name!r} for shard {owners[name]} and {(plan.split, index)}")
      owners[name] = (plan.split, index)
      names[(plan.split, index)] = name
  if clashes:
    raise ValueError(f"--shard-name-template {template!r} gives shards the same name: "
                     f"{'; '.join(clashes[:5])}; nothing was written")
  return names


def shard_lengths(count: int, num_shards: int) -> List[int]:
  """Examples per shard for rank-based cutting (what plan_split produces)."""
  return [((i + 1) * count) // num_shards - (i * count) // num_shards
          for i in range(num_shards)]

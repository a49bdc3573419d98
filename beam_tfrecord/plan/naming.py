"""Shard file names: the default TFDS-style name, --shard-name-template and its checks. Pure."""
from __future__ import annotations

import re
import string
from typing import Dict, Optional, Sequence, Set, Tuple

from beam_tfrecord.errors import UsageError
from beam_tfrecord.plan.shard_plan import SplitPlan
from beam_tfrecord.storage import layout, paths


def shard_name(split: str, index: int, num_shards: int, suffix: str = ".tfrecord") -> str:
  """TFDS-style name: train-00003-of-00008.tfrecord (0-based)."""
  return f"{split}-{index:05d}-of-{num_shards:05d}{suffix}"


DEFAULT_SHARD_NAME_TEMPLATE = "{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


def default_template(file_format: str) -> str:
  """The default shard names of a --file-format: DEFAULT_SHARD_NAME_TEMPLATE's, its suffix."""
  return DEFAULT_SHARD_NAME_TEMPLATE[:-len("tfrecord")] + file_format


TEMPLATE_FIELDS = ("split", "index", "num_shards", "count")


def template_fields(template: str) -> Set[str]:
  """The fields a --shard-name-template uses; UsageError when it cannot name files."""
  try:
    parsed = list(string.Formatter().parse(template))
  except ValueError as e:
    raise UsageError(f"--shard-name-template {template!r}: {e}") from None
  fields = set()
  for literal, field, spec, conversion in parsed:
    # a separator in the text or in a format spec (a fill character: '{split:/>5}' pads 'val'
    # to '//val', not 'train') would reach some names and not others: refused whatever the
    # splits, which may be known only once the data is read (split names have none)
    if any(c in (literal or "") + (spec or "") for c in "/\\\x00"):
      raise UsageError(f"--shard-name-template {template!r} must give plain file names: no "
                       "'/' or '\\' anywhere in it, fill characters included")
    if field is None:
      continue
    if field not in TEMPLATE_FIELDS:
      raise UsageError(f"--shard-name-template {template!r}: unknown field {{{field}}}; the "
                       f"fields are {', '.join('{%s}' % f for f in TEMPLATE_FIELDS)}")
    fields.add(field)
  try:
    sample = format_shard_name(template, "train", 1, 2, 3)
  except paths.UnsafeName:
    raise UsageError(f"--shard-name-template {template!r} must give plain file names (no "
                     "directories, not starting with '.'), e.g. "
                     f"{DEFAULT_SHARD_NAME_TEMPLATE!r}") from None
  except (ValueError, TypeError) as e:
    raise UsageError(f"--shard-name-template {template!r}: {e}") from None
  if not sample.strip():
    raise UsageError(f"--shard-name-template {template!r} gives a blank file name")
  return fields


def format_shard_name(template: str, split: str, index: int, num_shards: int,
                      count: int) -> str:
  """One shard's file name; paths.UnsafeName (a ValueError) unless it is a plain name directly
  inside the output that does not start with '.' (the tool's own hidden names). Checked for
  every name formatted, not one sample: a fill or a split name changes what one gives."""
  name = template.format(split=split, index=index, num_shards=num_shards, count=count)
  if paths.plain_name(name).startswith("."):
    raise paths.UnsafeName(f"{name!r} starts with '.', as the tool's hidden files do")
  return name


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
RESERVED_NAMES = (layout.MANIFEST, layout.LABEL_MAP, layout.LABELS_TXT, layout.CARD)
_ERROR_FILE = re.compile(r"^errors-\d{5}-of-\d{5}\.jsonl$")
MAX_ENUMERATED_SHARDS = 256  # check_names enumerates names up to this many shards per split


def reserved(name: str) -> bool:
  return name in RESERVED_NAMES or bool(_ERROR_FILE.match(name))


def check_names(template: str, splits: Optional[Set[str]], num_shards: Optional[int]) -> None:
  """Build-time check by enumeration, when the splits and --num-shards are known and the
  template has no {count}: UsageError when two shards could get one name (a split gets at
  most --num-shards shards, fewer when it has fewer images), a shard a reserved name, or a
  name is not a plain file name (format_shard_name; every split is tried even when the shard
  counts are not known). Otherwise the plan step checks the real names before anything is
  written (shard_names)."""
  fields = template_fields(template)
  try:
    for split in sorted(splits or ()):  # a fill pads short split names only: each is tried
      format_shard_name(template, split, 1, 2, 3)
    if not splits or not num_shards or "count" in fields or num_shards > MAX_ENUMERATED_SHARDS:
      return
    _check_names(template, fields, splits, num_shards)
  except paths.UnsafeName as e:
    raise UsageError(f"--shard-name-template {template!r} gives a name that is not a plain "
                     f"file name in the output: {e}") from None


def _check_names(template: str, fields: Set[str], splits: Set[str], num_shards: int) -> None:
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
      try:
        name = format_shard_name(template, plan.split, index, plan.num_shards,
                                 plan.records[index] if plan.records else 0)
      except paths.UnsafeName as e:
        raise ValueError(f"--shard-name-template {template!r} gives shard "
                         f"{(plan.split, index)} a name that is not a plain file name in the "
                         f"output ({e}); nothing was written") from None
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

"""Split names, --split fractions and the hash that assigns an image to a split. Pure."""
from __future__ import annotations

import hashlib
from typing import Dict, Mapping

from beam_tfrecord.records.model import check_split_name


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

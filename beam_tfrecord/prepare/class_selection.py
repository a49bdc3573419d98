"""--classes and --class-map: which source classes a run keeps, and what they are called.

Pure functions and one small record (ClassSelection); SelectClasses (prepare/select.py) applies
it to every source's images right after the source, before labels get ids. Beam-free: the
config validates the options with it.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import (AbstractSet, Dict, FrozenSet, Iterable, List, Optional,
                    Sequence, Tuple)


@dataclasses.dataclass(frozen=True)
class ClassSelection:
  """keep: the source class names kept (None: all); rename: {source name: new name}."""
  keep: Optional[FrozenSet[str]]
  rename: Tuple[Tuple[str, str], ...]

  def named(self) -> List[str]:
    """Every source class name the options name (each must exist in the source)."""
    return sorted(set(self.keep or ()) | {old for old, _ in self.rename})

  def target(self, name: str) -> Optional[str]:
    """The class a source class `name` becomes, or None when it is not kept."""
    if self.keep is not None and name not in self.keep:
      return None
    for old, new in self.rename:
      if old == name:
        return new
    return name


def _names(text: str, option: str) -> List[str]:
  names = [n.strip() for n in text.split(",")]
  if not names or any(not n for n in names):
    raise ValueError(f"{option} {text!r}: an empty class name (names are separated by ',')")
  return names


def parse(classes: Optional[str], class_map: Optional[str]) -> Optional[ClassSelection]:
  """The selection of --classes 'a,b' and --class-map 'old=new,...' (None when neither is
  given). ValueError, one line, for an empty name, a pair without '=', or a class renamed
  twice, or renamed but not kept by --classes."""
  if classes is None and class_map is None:
    return None
  keep = frozenset(_names(classes, "--classes")) if classes is not None else None
  rename: Dict[str, str] = {}
  for pair in _names(class_map, "--class-map") if class_map is not None else ():
    old, sep, new = pair.partition("=")
    old, new = old.strip(), new.strip()
    if not sep or not old or not new:
      raise ValueError(f"--class-map {pair!r}: give OLD=NEW (e.g. cat=pet,dog=pet)")
    if old in rename and rename[old] != new:
      raise ValueError(f"--class-map renames {old!r} twice ({rename[old]!r}, {new!r})")
    rename[old] = new
  if keep is not None:
    dropped = sorted(set(rename) - keep)
    if dropped:
      raise ValueError(f"--class-map renames {dropped[0]!r}, which --classes does not keep; "
                       "name it in --classes too")
  return ClassSelection(keep, tuple(sorted(rename.items())))


def unknown_names(selection: ClassSelection, source_names: Iterable[str]) -> List[str]:
  """Names the options give that the source does not have."""
  have = set(source_names)
  return [n for n in selection.named() if n not in have]


def _listed(names: Iterable[str], limit: int = 40) -> str:
  have = sorted(set(names))
  listed = ", ".join(have[:limit]) + (f" ... ({len(have)} in all)" if len(have) > limit else "")
  return listed or "no classes"


def unknown_message(unknown: Sequence[str], source_names: Iterable[str],
                    limit: int = 40) -> str:
  """One line: the unknown names and the classes the source has (at most `limit` listed)."""
  what = "is not a class" if len(unknown) == 1 else "are not classes"
  return (f"{', '.join(repr(n) for n in unknown)} {what} of the source; it has: "
          f"{_listed(source_names, limit)}")


def _closest(names: Sequence[str], have: AbstractSet[str]) -> Tuple[str, bool]:
  """'a' (closest: 'b', 'c'), ... for each name, and whether every one had a close name."""
  shown, all_close = [], True
  for name in names:
    close = difflib.get_close_matches(name, sorted(have), n=3)
    all_close = all_close and bool(close)
    shown.append(f"{name!r}" + (f" (closest: {', '.join(map(repr, close))})" if close else ""))
  return ", ".join(shown), all_close


def undeclared_message(selection: ClassSelection, declared: Optional[AbstractSet[str]],
                       where: str, label_map: Optional[AbstractSet[str]] = None,
                       label_map_uri: str = "") -> Optional[str]:
  """The launcher's check of the options against the classes known before the run: one line
  naming each source name the options give that the source does not declare (`declared`,
  from `where`), with the closest declared names; else each class the selection keeps that
  --label-map lacks (every object of it would be rejected). None when all fit, or when
  neither is known (the run's own check, unknown_names, then looks at the data)."""
  if declared is not None:
    unknown = [n for n in selection.named() if n not in declared]
    if unknown:
      option = "--classes" if selection.keep is not None else "--class-map"
      shown, all_close = _closest(unknown, declared)
      what = "is not a class" if len(unknown) == 1 else "are not classes"
      return (f"{option} {shown} {what} of the source ({where})"
              + ("" if all_close else f"; it has: {_listed(declared)}"))
  if label_map is not None:
    missing = sorted({selection.target(n) or n for n in selection.named()} - set(label_map))
    if missing:
      shown, all_close = _closest(missing, label_map)
      what = "class" if len(missing) == 1 else "classes"
      return (f"--label-map {label_map_uri} has no {what} {shown}, which --classes/--class-map "
              "keep: every object of it would be rejected (unknown_class)"
              + ("" if all_close else f"; it has: {_listed(label_map)}"))
  return None


def select_labels(labels: Sequence[str], selection: ClassSelection
                  ) -> Tuple[List[str], Dict[str, int]]:
  """(kept labels renamed, in order; {source name: times excluded})."""
  kept: List[str] = []
  excluded: Dict[str, int] = {}
  for name in labels:
    new = selection.target(name)
    if new is None:
      excluded[name] = excluded.get(name, 0) + 1
    else:
      kept.append(new)
  return kept, excluded


def renumber(categories: Iterable[Tuple[str, int]], first_id: int) -> Dict[str, int]:
  """{name: id} of a selection's categories (already renamed; source ids: COCO ids, YOLO's
  order, class folders), numbered afresh from `first_id` in the order of each name's smallest
  source id (a merged class takes its first member's place), so ids stay contiguous."""
  first: Dict[str, int] = {}
  for name, source_id in categories:
    if name not in first or source_id < first[name]:
      first[name] = source_id
  order = sorted(first, key=lambda n: (first[n], n))
  return {name: first_id + i for i, name in enumerate(order)}

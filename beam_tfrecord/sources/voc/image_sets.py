"""Pascal VOC's image sets (ImageSets/Main/<set>.txt) as splits: which sets there are, which
split an image of several sets is in, and the ids a set lists without an XML. Beam-free."""
from __future__ import annotations

import posixpath
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import paths


def parse_image_set(text: str) -> List[str]:
  """Image ids of one ImageSets/Main/<split>.txt (first column; class files add a flag)."""
  return [line.split()[0] for line in text.splitlines() if line.strip()]


# Image sets that are the union of others (VOC's trainval = train + val): not splits of their
# own when a part is present. With one part present, the other is the union minus it.
UNIONS: Dict[str, Tuple[str, ...]] = {"trainval": ("train", "val")}


def split_files(voc_root: str, folder: str = "Main") -> Dict[str, str]:
  """{image set: uri} of ImageSets/<folder>/*.txt; in Main without the per-class lists
  (aeroplane_train), which Segmentation has none of (its train_aug.txt is a set)."""
  from apache_beam.io.filesystems import FileSystems
  pattern = paths.join(paths.glob_escape(voc_root), f"ImageSets/{folder}/*.txt")
  try:
    found = FileSystems.match([pattern])[0].metadata_list
  except Exception:
    return {}
  result = {}
  for meta in found:
    name = posixpath.basename(meta.path.replace("\\", "/"))[:-4]
    if ("_" not in name or folder != "Main") and not name.startswith((".", "-")):
      result[name] = meta.path
  return dict(sorted(result.items()))


def resolve_split(member_of: Iterable[str], scope: Iterable[str]) -> Tuple[Optional[str], str]:
  """(split, '') for an image listed in the image sets `member_of`, considering only the sets
  in `scope`; (None, reason) when it is in none or in several. A union set counts only when
  none of its parts is in scope; with one part in scope, the union minus that part is the
  other part (only train and trainval: val = trainval - train)."""
  scope = set(scope)
  member = set(member_of) & scope
  for union, parts in UNIONS.items():
    present = [p for p in parts if p in scope]
    if union not in scope or not present:
      continue
    if union in member:
      member.discard(union)
      if len(present) == 1 and not member & set(parts):
        member.add(next(p for p in parts if p not in present))
  if len(member) == 1:
    return next(iter(member)), ""
  return None, "not_in_split" if not member else "several_splits"


def split_names(scope: Iterable[str]) -> List[str]:
  """The splits that image sets `scope` produce (see resolve_split)."""
  scope = set(scope)
  names = set(scope)
  for union, parts in UNIONS.items():
    present = [p for p in parts if p in scope]
    if union in scope and present:
      names.discard(union)
      names.update(parts)
  return sorted(names)


def missing_annotations(element, scope: Sequence[str], lists: Dict[str, str]
                        ) -> List[ErrorRecord]:
  """(image id, {"xml": [...], "lists": [[set, ...]]}) -> a missing_annotation error when the
  chosen image sets `scope` list the id but Annotations/ has no XML for it (its image would
  vanish without a word)."""
  stem, joined = element
  if list(joined["xml"]):
    return []
  return missing_annotation(stem, [name for sets in joined["lists"] for name in sets], scope,
                            lists, "Main", f"Annotations/ has no {stem}.xml")


def missing_annotation(stem: str, member_of: Iterable[str], scope: Sequence[str],
                       lists: Dict[str, str], folder: str, lacking: str) -> List[ErrorRecord]:
  """The missing_annotation error of an id the chosen sets of ImageSets/<folder> list while
  its annotation is not there (`lacking` says which); none for an id no chosen set lists."""
  chosen = sorted(set(member_of) & set(scope))
  if not chosen:
    return []
  return [ErrorRecord(
      source=lists[chosen[0]], stage="parse", reason="missing_annotation", key=stem,
      level="image",
      message=f"image id {stem!r} is listed in ImageSets/{folder}/{', '.join(chosen)} but "
      f"{lacking}: it cannot be converted")]


def split_of(source: str, key: str, stem: str, member_of: Sequence[str], scope: Sequence[str],
             folder: str = "Main") -> Tuple[Optional[str], Optional[ErrorRecord]]:
  """(split, None) of an image the image sets `member_of` name (resolve_split), else (None,
  the error that keeps it out; a warning when only sets that were not chosen name it)."""
  split, reason = resolve_split(member_of, scope)
  if split is not None:
    return split, None
  where = f"the lists {sorted(member_of)}" if member_of else f"no ImageSets/{folder} list"
  message = f"image id {stem!r} is named by {where}"
  if reason == "not_in_split" and member_of:  # only in sets that were not chosen
    return None, ErrorRecord(
        source=source, stage="parse", reason="excluded_by_image_sets", key=key,
        level="warning", message=f"{message}, none of the chosen image sets {list(scope)}")
  return None, ErrorRecord(source=source, stage="parse", reason=reason, key=key, level="image",
                           message=message)


def parse_image_sets(text: str) -> List[str]:
  return [name.strip() for name in text.split(",") if name.strip()]

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


def split_files(voc_root: str) -> Dict[str, str]:
  """{image set: uri} of ImageSets/Main/*.txt, without the per-class lists (aeroplane_train)."""
  from apache_beam.io.filesystems import FileSystems
  pattern = paths.join(paths.glob_escape(voc_root), "ImageSets/Main/*.txt")
  try:
    found = FileSystems.match([pattern])[0].metadata_list
  except Exception:
    return {}
  result = {}
  for meta in found:
    name = posixpath.basename(meta.path.replace("\\", "/"))[:-4]
    if "_" not in name and not name.startswith((".", "-")):
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
  member_of = sorted({name for sets in joined["lists"] for name in sets} & set(scope))
  if not member_of:
    return []
  return [ErrorRecord(
      source=lists[member_of[0]], stage="parse", reason="missing_annotation", key=stem,
      level="image",
      message=f"image id {stem!r} is listed in ImageSets/Main/{', '.join(member_of)} but "
      f"Annotations/ has no {stem}.xml: it cannot be converted")]


def parse_image_sets(text: str) -> List[str]:
  return [name.strip() for name in text.split(",") if name.strip()]

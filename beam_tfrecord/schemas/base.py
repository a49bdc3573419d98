"""What every schema shares: the result of encoding one image, the objects that can be
written, and --feature-names. Pure: no Beam, no TensorFlow."""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records import boxes, protos
from beam_tfrecord.records.model import (ErrorRecord, ImageAnnotation,
                                         InputError)

Spec = Dict[str, Tuple[str, str]]  # key -> (dtype, "fixed" | "var")


@dataclasses.dataclass
class Encoded:
  """One image encoded: its records (several for per-object schemas, in order; none skips
  the image), the class of each object written, clipped boxes and the per-object problems."""
  records: List[bytes]        # serialized Examples of one image, in order
  labels: List[str]           # class names written (for the manifest's per-class counts)
  clipped: int
  errors: List[ErrorRecord]

  @property
  def serialized(self) -> bytes:
    """The record of a one-record-per-image schema."""
    if len(self.records) != 1:
      raise ValueError(f"{len(self.records)} records, not one")
    return self.records[0]


Records = Encoded  # the name the schema modules use


def one_class(ann: ImageAnnotation, schema: str) -> str:
  """The image's one class for a per-image label schema: its image-level label (class
  folders, listings), else the class all its objects share. InputError (the image is
  rejected) with several classes or none."""
  names = sorted(set(ann.labels)) or sorted({obj.label for obj in ann.objects})
  if len(names) != 1:
    raise InputError("validate", "not_one_class",
                     f"the {schema} schema needs one class per image; the image has "
                     f"{names or 'none'}")
  return names[0]


def valid_objects(ann: ImageAnnotation, width: int, height: int, label_map: Mapping[str, int],
                  bbox_policy: str) -> Tuple[List[Tuple[boxes.NormalizedObject, int]],
                                             List[ErrorRecord]]:
  """(normalized object, label id) for the objects that can be written, in order; the others
  as object-level errors. With bbox_policy='error' a box partly outside the image raises
  (the whole image fails)."""
  kept, errors = [], []
  for obj in ann.objects:
    try:
      norm = boxes.normalize(obj, width, height, bbox_policy)
      if obj.label not in label_map:
        raise InputError("validate", "unknown_class",
                         f"class {obj.label!r} is not in the label map")
    except InputError as e:
      if bbox_policy == "error" and e.reason == "bbox_partly_outside":
        raise
      errors.append(e.record(ann.source, ann.key, level="object"))
      continue
    kept.append((norm, label_map[obj.label]))
  return kept, errors


def bytes_feature(values: Sequence[bytes]):
  return protos.Feature(bytes_list={"value": list(values)})


def float_feature(values: Sequence[float]):
  return protos.Feature(float_list={"value": list(values)})


def int64_feature(values: Sequence[int]):
  return protos.Feature(int64_list={"value": list(values)})


def stable_id(text: str) -> int:
  """A deterministic non-negative int64 for sources without numeric ids."""
  return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") >> 1


def serialize(features: Dict, renames: Optional[Mapping[str, str]] = None) -> bytes:
  """Features (key -> protos.Feature) as a deterministic serialized Example, keys renamed."""
  if renames:
    features = {renames.get(k, k): v for k, v in features.items()}
  example = protos.Example(features=protos.Features(feature=features))
  return example.SerializeToString(deterministic=True)


def parse_feature_names(text: Optional[str], spec: Spec) -> Dict[str, str]:
  """'depth=channels,image_raw=image' -> {'depth': 'channels', ...}, checked against the
  schema's keys; UsageError when a key is unknown, given twice, or two keys end up equal."""
  if not text:
    return {}
  renames: Dict[str, str] = {}
  for part in text.split(","):
    old, sep, new = (p.strip() for p in part.partition("="))
    if not sep or not old or not new:
      raise UsageError(f"--feature-names: bad item {part!r}, expected OLD=NEW")
    if old not in spec:
      raise UsageError(f"--feature-names: {old!r} is not a key of this schema "
                       f"({', '.join(spec)})")
    if old in renames:
      raise UsageError(f"--feature-names: {old!r} renamed twice")
    renames[old] = new
  final = [renames.get(k, k) for k in spec]
  clashes = sorted({k for k in final if final.count(k) > 1})
  if clashes:
    raise UsageError(f"--feature-names: two features would be named {clashes}")
  return renames


def renamed(spec: Spec, renames: Mapping[str, str]) -> Spec:
  return {renames.get(k, k): v for k, v in spec.items()}

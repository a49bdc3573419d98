"""Record schemas: one module per schema, each turning (ImageAnnotation, prepared image) into
serialized tf.train.Examples. The registry below is the only thing callers use.

A schema module provides:
  NAME           the name recorded in manifest.json `schema`
  FEATURE_SPEC   {key: (dtype, kind)}, kind "fixed" (one value per record) or "var" (a list);
                 recorded in manifest.json `features`, from which reader.load parses
  FIRST_ID       the id of the first class when ids are numbered from sorted names
  IMAGE_LEVEL    True when the schema wants one class per image (classification)
  encode(ann, image, label_map, options) -> Encoded, a LIST of records: a per-object schema
                 returns one per object, a per-image schema one (or none to skip the image)
Anything done to every schema's output (renaming features, say) belongs in `Schema`, so that
the sinks, the manifest and the reader need no change.

How a schema serializes is its own business: od_api writes the wire format directly from a
precomputed protos.ExampleLayout (the hot path, byte-identical to protobuf's deterministic
serialization, asserted in tests); the others build protobuf messages. A digest of the image
computed by the shard writer's read-ahead arrives as PreparedImage.sha256_hex
(image.sha256() falls back to hashing).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Dict, List, Mapping, Tuple

from beam_tfrecord.model import ErrorRecord

# --schema value -> module
REGISTRY: Dict[str, str] = {
    "od-api": "beam_tfrecord.schemas.od_api",
    "classification": "beam_tfrecord.schemas.classification",
}
DEFAULT = "od-api"


@dataclasses.dataclass
class Encoded:
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


@dataclasses.dataclass(frozen=True)
class Schema:
  """A schema as the pipeline sees it (picklable: the module is looked up by name)."""
  option: str                 # the --schema value

  @property
  def module(self) -> Any:
    return importlib.import_module(REGISTRY[self.option])

  @property
  def name(self) -> str:
    return self.module.NAME

  @property
  def feature_spec(self) -> Dict[str, Tuple[str, str]]:
    return dict(self.module.FEATURE_SPEC)

  @property
  def first_id(self) -> int:
    return self.module.FIRST_ID

  @property
  def image_level(self) -> bool:
    return self.module.IMAGE_LEVEL

  def manifest_features(self) -> Dict[str, Dict[str, str]]:
    return {k: {"dtype": d, "kind": kind} for k, (d, kind) in self.feature_spec.items()}

  def encode(self, ann, image, label_map: Mapping[str, int], options) -> Encoded:
    return self.module.encode(ann, image, label_map, options.bbox_policy)


def get(option: str) -> Schema:
  if option not in REGISTRY:
    raise ValueError(f"--schema must be one of {', '.join(REGISTRY)}")
  return Schema(option)


def from_options(options: Any) -> Schema:
  """The schema an EncodeOptions asks for: what the writers and the manifest both use, so
  that a schema setting added to EncodeOptions reaches both alike."""
  return get(options.schema)


def first_id_of(name: Any) -> int:
  """FIRST_ID of the schema a manifest names (its NAME); 1 for unknown or older manifests."""
  for option in REGISTRY:
    try:
      if get(option).name == name:
        return get(option).first_id
    except ImportError:  # a registered module that is not importable here
      continue
  return 1

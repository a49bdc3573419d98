"""Record schemas: one module per schema, each turning (ImageAnnotation, prepared image) into
serialized tf.train.Examples. The registry below is the only thing callers use.

A schema module provides:
  NAME           the name recorded in manifest.json `schema`
  FEATURE_SPEC   {key: (dtype, kind)}, kind "fixed" (one value per record) or "var" (a list);
                 recorded in manifest.json `features`, from which reader.load parses
  FIRST_ID       the id of the first class when ids are numbered from sorted names
  FIRST_ID_IMAGE_LEVEL  (optional) FIRST_ID for image-level sources (class folders, listings)
  IMAGE_LEVEL    True when the schema wants one class per image (classification)
  encode(ann, image, label_map, bbox_policy, **options) -> Encoded, a LIST of records: a
                 per-object schema returns one per object, a per-image schema one (or none to
                 skip the image). Options passed only when set: renames={old: new}
                 (--feature-names; base.serialize applies them), include_masks=True
and optionally:
  planned_records(ann) -> int   records written for one image (--records-per-shard); default 1
  feature_spec(include_masks)   FEATURE_SPEC plus MASK_FEATURE (schemas that write masks)
  MASK_FEATURE                  the key --include-masks writes (absent: masks not supported)
  CLASS_MASK_FEATURE            the key of one class mask per image (deeplab): the writer
                                paints or reads it and passes class_mask=masks.ClassMask
  IMAGE_FORMAT                  the one image format its readers decode ('keep' turns into it)
Anything done to every schema's output belongs in `Schema`, so that the sinks, the manifest
and the reader need no change. Helpers shared by schema modules are in `base`.

How a schema serializes is its own business: od_api writes the wire format directly from a
precomputed protos.ExampleLayout (the hot path, byte-identical to protobuf's deterministic
serialization, asserted in tests); the others build protobuf messages. A digest of the image
computed by the shard writer's read-ahead arrives as PreparedImage.sha256_hex
(image.sha256() falls back to hashing).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from beam_tfrecord.records.batches import FROM_PLAIN
from beam_tfrecord.schemas import base
from beam_tfrecord.schemas.base import Encoded  # noqa: F401 (re-exported)
from beam_tfrecord.schemas.base import parse_feature_names

# --schema value -> module
REGISTRY: Dict[str, str] = {
    "od-api": "beam_tfrecord.schemas.od_api",
    "classification": "beam_tfrecord.schemas.classification",
    "tutorial": "beam_tfrecord.schemas.tutorial",
    "coco-objects": "beam_tfrecord.schemas.coco_objects",
    "deeplab": "beam_tfrecord.schemas.deeplab",
    # --layout tfds chooses one of these (finalize/tfds_layout.py)
    "tfds-detection": "beam_tfrecord.schemas.tfds_detection",
    "tfds-image-folder": "beam_tfrecord.schemas.tfds_image_folder",
}
DEFAULT = "od-api"


def _one_record(_) -> int:
  return 1


@dataclasses.dataclass(frozen=True)
class Schema:
  """A schema as the pipeline sees it, with the run's settings that change its records
  (picklable: the module is looked up by name)."""
  option: str                 # the --schema value
  include_masks: bool = False
  renames: Tuple[Tuple[str, str], ...] = ()   # --feature-names, (old, new) pairs

  @property
  def module(self) -> Any:
    return _module(REGISTRY[self.option])

  @property
  def name(self) -> str:
    return self.module.NAME

  @property
  def feature_spec(self) -> Dict[str, Tuple[str, str]]:
    """The keys written (final names: --feature-names applied), as manifest.json records."""
    module = self.module
    spec = (module.feature_spec(self.include_masks) if hasattr(module, "feature_spec")
            else dict(module.FEATURE_SPEC))
    renames = dict(self.renames)
    return {renames.get(k, k): v for k, v in spec.items()}

  @property
  def first_id(self) -> int:
    return getattr(self.module, "FIRST_ID", 1)

  def first_id_for(self, image_level_source: bool) -> int:
    """The first id for a source that labels whole images (True) or boxes (False)."""
    if image_level_source:
      return getattr(self.module, "FIRST_ID_IMAGE_LEVEL", self.first_id)
    return self.first_id

  @property
  def image_level(self) -> bool:
    return getattr(self.module, "IMAGE_LEVEL", False)

  @property
  def masks(self) -> bool:
    """Whether --include-masks applies (the schema has a mask feature, or paints one)."""
    return hasattr(self.module, "MASK_FEATURE") or self.class_masks

  @property
  def class_masks(self) -> bool:
    """Whether each record holds one class mask (deeplab), painted from the objects'
    segmentations or read from the source's class PNG: what --include-masks keeps."""
    # asked once an image: hasattr of an absent name builds and drops an AttributeError
    # (2.5 us; this 0.6 us, loaded 2-core machine)
    return "CLASS_MASK_FEATURE" in vars(self.module)

  @property
  def image_format(self) -> Optional[str]:
    return getattr(self.module, "IMAGE_FORMAT", None)

  def with_masks(self, include_masks: bool) -> "Schema":
    return dataclasses.replace(self, include_masks=include_masks)

  def records_counter(self) -> Callable[[Any], int]:
    """planned_records as a plain function of a batch's image (records/batches), the module
    looked up once (the lookup cost 6 us an image in the pipeline's Pack step). A schema
    without planned_records writes one record an image and makes no ImageAnnotation."""
    planned = getattr(self.module, "planned_records", None)
    if planned is None:
      return _one_record
    return lambda image: planned(FROM_PLAIN(image))

  def manifest_features(self, keypoints: bool = False) -> Dict[str, Dict[str, str]]:
    """The feature spec as manifest.json records it; with `keypoints` (the source has them)
    the schema's KEYPOINT_SPEC too."""
    spec = dict(self.feature_spec)
    if keypoints:
      spec.update(base.renamed(getattr(self.module, "KEYPOINT_SPEC", {}), dict(self.renames)))
    return {k: {"dtype": d, "kind": kind} for k, (d, kind) in spec.items()}

  def encode(self, ann, image, label_map: Mapping[str, int], options, **given: Any) -> Encoded:
    """`given`: what the writer made for this schema (class_mask), passed on as it is."""
    extra: Dict[str, Any] = dict(given)
    if self.include_masks:
      extra["include_masks"] = True
    if self.renames:
      extra["renames"] = dict(self.renames)
    return self.module.encode(ann, image, label_map, options.bbox_policy, **extra)


@functools.lru_cache(maxsize=None)
def _module(name: str) -> Any:
  """importlib.import_module, once per name: the writers ask for a schema's module several
  times an image (import_module took 0.5 us a call, this 0.1 us: loaded 2-core machine)."""
  return importlib.import_module(name)


def get(option: str) -> Schema:
  if option not in REGISTRY:
    raise ValueError(f"--schema must be one of {', '.join(REGISTRY)}")
  return Schema(option)


def from_options(options: Any) -> Schema:
  """The schema an EncodeOptions asks for: what the writers and the manifest both use, so
  that a schema setting added to EncodeOptions (masks, feature names) reaches both alike."""
  return _configured(options.schema, bool(getattr(options, "include_masks", False)),
                     tuple(getattr(options, "renames", ())))


@functools.lru_cache(maxsize=64)
def _configured(option: str, include_masks: bool, renames: Tuple) -> Schema:
  """Cached: the writers ask once per image (16 us each uncached)."""
  return dataclasses.replace(get(option), include_masks=include_masks, renames=renames)


def first_id_of(name: Any) -> int:
  """The lowest first id of the schema a manifest names (its NAME), whatever the source; 1
  for unknown or older manifests."""
  for option in REGISTRY:
    try:
      if get(option).name == name:
        return min(get(option).first_id_for(False), get(option).first_id_for(True))
    except ImportError:  # a registered module that is not importable here
      continue
  return 1

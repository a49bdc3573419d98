"""manifest.json as typed values: the contract between the run that writes an output and every
reader of it (--append runs, verify, inspect, show, the card, the reader).

Modelled on TFDS's DatasetInfo / SplitInfo / shard specs: finalize builds a `Manifest`, writes
`to_json()`, and every reader parses the file once with `Manifest.from_json`. The JSON is the
one earlier versions wrote (same keys, same order), so older outputs read as they are. A
manifest is plain JSON anyone can edit: `from_json` checks every type it relies on and raises
ValueError naming the field, and keeps keys it does not know in `extra` (written back as
they were). Pure and Beam-free.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple, Union

_NUMBER = (int, float)


def _check(value: Any, kinds, where: str, optional: bool = False) -> Any:
  if value is None and optional:
    return None
  if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
    raise ValueError(f"manifest.json: {where} is a boolean, not a {_kind_name(kinds)}")
  if not isinstance(value, kinds):
    raise ValueError(f"manifest.json: {where} is {type(value).__name__}, not a "
                     f"{_kind_name(kinds)}")
  return value


def _kind_name(kinds) -> str:
  names = {int: "number", float: "number", str: "string", dict: "object", list: "list"}
  kinds = kinds if isinstance(kinds, tuple) else (kinds,)
  return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _counts(value: Any, where: str) -> Dict[str, int]:
  return {str(k): v for k, v in _check(value if value is not None else {}, dict, where).items()}


@dataclasses.dataclass(frozen=True)
class ShardInfo:
  """One shard file of a split. examples/objects are None where unknown (--sink beam)."""
  path: str
  examples: Optional[int]
  objects: Optional[int]
  bytes: int

  def to_json(self) -> Dict[str, Any]:
    return {"path": self.path, "examples": self.examples, "objects": self.objects,
            "bytes": self.bytes}

  @classmethod
  def from_json(cls, item: Any, where: str) -> "ShardInfo":
    item = _check(item, dict, where)
    return cls(path=_check(item.get("path"), str, f"{where}.path"),
               examples=_check(item.get("examples"), int, f"{where}.examples", optional=True),
               objects=_check(item.get("objects"), int, f"{where}.objects", optional=True),
               bytes=_check(item.get("bytes", 0), int, f"{where}.bytes"))


@dataclasses.dataclass(frozen=True)
class SplitInfo:
  """One split: its totals, its class counts and its shards in order."""
  examples: int = 0
  images: int = 0
  objects: int = 0
  bytes: int = 0
  clipped_boxes: int = 0
  reoriented_images: int = 0
  classes: Dict[str, int] = dataclasses.field(default_factory=dict)
  shards: Tuple[ShardInfo, ...] = ()

  @property
  def num_shards(self) -> int:
    return len(self.shards)

  def to_json(self) -> Dict[str, Any]:
    return {"examples": self.examples, "images": self.images, "objects": self.objects,
            "bytes": self.bytes, "clipped_boxes": self.clipped_boxes,
            "reoriented_images": self.reoriented_images, "classes": dict(self.classes),
            "shards": [s.to_json() for s in self.shards], "num_shards": self.num_shards}

  @classmethod
  def from_json(cls, entry: Any, where: str) -> "SplitInfo":
    entry = _check(entry, dict, where)
    shards = _check(entry.get("shards", []), list, f"{where}.shards")
    numbers = {name: _check(entry.get(name, 0), int, f"{where}.{name}")
               for name in ("examples", "objects", "bytes", "clipped_boxes",
                            "reoriented_images")}
    # manifests from before the images count: one record per image
    numbers["images"] = _check(entry.get("images", numbers["examples"]), int,
                               f"{where}.images")
    return cls(**numbers, classes=_counts(entry.get("classes"), f"{where}.classes"),
               shards=tuple(ShardInfo.from_json(s, f"{where}.shards[{i}]")
                            for i, s in enumerate(shards)))


@dataclasses.dataclass(frozen=True)
class ErrorSummary:
  """The run's error report: counts by level and by reason, and the errors-*.jsonl files."""
  count: int = 0
  rate: float = 0.0
  by_level: Dict[str, int] = dataclasses.field(default_factory=dict)
  by_reason: Dict[str, int] = dataclasses.field(default_factory=dict)
  files: Tuple[str, ...] = ()

  @property
  def warnings(self) -> int:
    return self.by_level.get("warning", 0)

  def to_json(self) -> Dict[str, Any]:
    return {"count": self.count, "rate": self.rate, "by_level": dict(self.by_level),
            "by_reason": dict(self.by_reason), "files": list(self.files)}

  @classmethod
  def from_json(cls, item: Any) -> "ErrorSummary":
    item = _check(item if item is not None else {}, dict, "errors")
    files = _check(item.get("files", []), list, "errors.files")
    return cls(count=_check(item.get("count", 0), int, "errors.count"),
               rate=_check(item.get("rate", 0.0), _NUMBER, "errors.rate"),
               by_level=_counts(item.get("by_level"), "errors.by_level"),
               by_reason=_counts(item.get("by_reason"), "errors.by_reason"),
               files=tuple(_check(f, str, f"errors.files[{i}]") for i, f in enumerate(files)))


@dataclasses.dataclass(frozen=True)
class Leakage:
  """Copies found by content (write/contents.py): images written under other names whose
  bytes (SHA-256) equal another's. Counts are of extra copies: a content in train and val is
  one leaked_across_splits, three files of one content in a split two duplicate_content.
  images_checked were compared: hashed by this run, or kept or copied by --append with the
  digest their catalog row has; images_unchecked were not (a row without one)."""
  leaked_across_splits: int = 0
  duplicate_content: int = 0
  images_checked: int = 0
  images_unchecked: int = 0

  @property
  def copies(self) -> int:
    return self.leaked_across_splits + self.duplicate_content

  def to_json(self) -> Dict[str, int]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, item: Any) -> "Leakage":
    item = _check(item, dict, "leakage")
    return cls(**{f.name: _check(item.get(f.name, 0), int, f"leakage.{f.name}")
                  for f in dataclasses.fields(cls)})


# Keys written in this order; the optional ones only when set (shard_plan: --sink shards,
# incremental: --append, excluded_classes: --classes/--class-map; leakage: runs since
# the check, write/contents.py).
_KEYS = ("tool", "version", "status", "outcome", "run_id", "created", "schema", "format", "sink",
         "args", "source_fingerprint", "config", "features", "label_map", "keypoints",
         "shard_plan",
         "incremental", "excluded_classes", "splits", "totals", "errors", "leakage", "files")
_OPTIONAL = ("shard_plan", "incremental", "excluded_classes", "leakage", "keypoints")


@dataclasses.dataclass(frozen=True)
class Manifest:
  """What a run wrote and how (see docs/output.md for each field)."""
  tool: str = "beam-tfrecord"
  version: str = ""
  status: str = ""                      # 'ok' or 'failed: why'
  outcome: str = ""                     # finalize/manifest.OUTCOMES: its exit code
  run_id: str = ""
  created: str = ""                     # ISO 8601, UTC
  schema: str = "od_api"
  format: str = ""
  sink: str = "shards"
  args: Tuple[str, ...] = ()
  source_fingerprint: Optional[Dict[str, Any]] = None
  config: Dict[str, Any] = dataclasses.field(default_factory=dict)   # the settings, as given
  features: Dict[str, Any] = dataclasses.field(default_factory=dict)  # key -> feature spec
  label_map: Dict[str, int] = dataclasses.field(default_factory=dict)
  keypoints: Optional[Dict[str, Any]] = None    # records/keypoints.KeypointLayout.to_json
  shard_plan: Optional[Dict[str, Any]] = None   # plan/previous reads and checks it
  incremental: Optional[Dict[str, Any]] = None
  excluded_classes: Optional[Dict[str, int]] = None
  splits: Dict[str, SplitInfo] = dataclasses.field(default_factory=dict)
  totals: Dict[str, int] = dataclasses.field(default_factory=dict)
  errors: ErrorSummary = ErrorSummary()
  leakage: Optional[Leakage] = None             # None: a manifest from before the check
  files: Optional[Tuple[str, ...]] = None       # None: a manifest from before the list
  extra: Dict[str, Any] = dataclasses.field(default_factory=dict)  # keys of other versions

  @property
  def ok(self) -> bool:
    return self.status == "ok"

  @property
  def num_shards(self) -> int:
    return sum(s.num_shards for s in self.splits.values())

  def setting(self, name: str, default: Any = None) -> Any:
    """One setting of the run that wrote it (its config as recorded)."""
    return self.config.get(name, default)

  def to_json(self) -> Dict[str, Any]:
    """The JSON object, keys in the order every version wrote them."""
    values = {"args": list(self.args), "errors": self.errors.to_json(),
              "splits": {k: v.to_json() for k, v in self.splits.items()},
              "files": list(self.files) if self.files is not None else None,
              "leakage": self.leakage.to_json() if self.leakage is not None else None}
    result = {}
    for key in _KEYS:
      value = values[key] if key in values else getattr(self, key)
      if value is None and (key in _OPTIONAL or key == "files"):
        continue
      result[key] = value
    result.update(self.extra)
    return result

  @classmethod
  def from_json(cls, data: Any) -> "Manifest":
    """A parsed manifest.json (ValueError naming the field when a type is wrong)."""
    data = _check(data, dict, "the file")
    splits = _check(data.get("splits", {}), dict, "splits")
    files = _check(data.get("files"), list, "files", optional=True)
    args = _check(data.get("args", []), list, "args")
    label_map = _check(data.get("label_map") or {}, dict, "label_map")
    text = {key: _check(data.get(key, getattr(cls, key)), str, key)
            for key in ("tool", "version", "status", "outcome", "run_id", "created", "schema",
                        "format", "sink")}
    objects = {key: _check(data.get(key), dict, key, optional=True)
               for key in ("source_fingerprint", "shard_plan", "incremental",
                           "excluded_classes", "keypoints")}
    return cls(
        **text, **objects, args=tuple(str(a) for a in args),
        config=_check(data.get("config") or {}, dict, "config"),
        features=_check(data.get("features") or {}, dict, "features"),
        label_map={str(k): _check(v, int, f"label_map[{k!r}]") for k, v in label_map.items()},
        splits={str(k): SplitInfo.from_json(v, f"splits.{k}") for k, v in splits.items()},
        totals=_counts(data.get("totals"), "totals"),
        errors=ErrorSummary.from_json(data.get("errors")),
        leakage=Leakage.from_json(data["leakage"]) if data.get("leakage") is not None else None,
        files=tuple(files) if files is not None else None,
        extra={k: v for k, v in data.items() if k not in _KEYS})

  @classmethod
  def of(cls, value: Union["Manifest", Mapping[str, Any]]) -> "Manifest":
    """A Manifest as it is, or one parsed from its JSON object."""
    return value if isinstance(value, Manifest) else cls.from_json(dict(value))

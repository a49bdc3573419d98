"""build(pipeline, config): source -> group by image -> plan shards -> write -> finalize."""
from __future__ import annotations

import dataclasses
import datetime
import json
import posixpath
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

import beam_tfrecord
from beam_tfrecord import label_map as label_maps
from beam_tfrecord import paths, sharding
from beam_tfrecord.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.schemas import od_api
from beam_tfrecord.sink import WriteShards, WriteWithBeamSink
from beam_tfrecord.sources import SourceOutput
from beam_tfrecord.sources.coco import ReadCoco
from beam_tfrecord.sources.csv import ReadCsv, parse_column_map
from beam_tfrecord.sources.voc import ReadVoc

FORMATS = ("coco", "voc", "csv")
SINKS = ("shards", "beam")
DEFAULT_SPLIT = "train"
MANIFEST = "manifest.json"
LABEL_MAP = "label_map.pbtxt"


@dataclasses.dataclass
class ConvertConfig:
  """Everything a conversion needs besides Beam's own pipeline options."""
  format: str
  inputs: List[str]                       # [SPLIT=]URI of annotation files (VOC: the VOC root)
  output: str
  images: List[str] = dataclasses.field(default_factory=list)  # [SPLIT=]image root
  label_map: Optional[str] = None
  split: Optional[str] = None             # 'train=0.8,val=0.2': hash-assigned splits
  num_shards: Optional[int] = None
  shard_size_mb: Optional[float] = None
  sink: str = "shards"
  csv_columns: Optional[str] = None
  bbox_policy: str = "clip"
  allow_absolute_paths: bool = False
  overwrite: bool = False

  def validate(self) -> None:
    if self.format not in FORMATS:
      raise ValueError(f"--format must be one of {', '.join(FORMATS)}")
    if not self.inputs:
      raise ValueError("give at least one --input")
    if self.sink not in SINKS:
      raise ValueError(f"--sink must be one of {', '.join(SINKS)}")
    if self.num_shards is not None and self.num_shards < 1:
      raise ValueError("--num-shards must be at least 1")
    if self.num_shards and self.shard_size_mb:
      raise ValueError("give --num-shards or --shard-size-mb, not both")
    if self.shard_size_mb is not None and self.shard_size_mb <= 0:
      raise ValueError("--shard-size-mb must be positive")
    if self.split:
      sharding.parse_split_fractions(self.split)
    parse_column_map(self.csv_columns)

  def split_fractions(self) -> Optional[Dict[str, float]]:
    return sharding.parse_split_fractions(self.split) if self.split else None


def _image_roots(config: ConvertConfig) -> Tuple[Optional[str], Dict[str, str]]:
  default, per_split = None, {}
  for item in config.images:
    split, root = paths.parse_assignment(item)
    if split:
      per_split[split] = root
    else:
      default = root
  return default, per_split


def _file_inputs(config: ConvertConfig) -> List[Tuple[Optional[str], str, str]]:
  """(split, annotation uri, image root) for COCO and CSV inputs."""
  default_root, per_split = _image_roots(config)
  result = []
  for item in config.inputs:
    split, uri = paths.parse_assignment(item)
    root = per_split.get(split or "", default_root)
    if root is None:
      root = posixpath.dirname(uri) if paths.is_remote(uri) else \
          __import__("os").path.dirname(uri) or "."
    result.append((split, uri, root))
  return result


def read_source(root, config: ConvertConfig) -> Tuple[SourceOutput, List[str]]:
  """The format's source transform, and the split names known before running."""
  allow = config.allow_absolute_paths
  if config.format == "coco":
    inputs = _file_inputs(config)
    return (root | "ReadCoco" >> ReadCoco(inputs, allow),
            sorted({s for s, _, _ in inputs if s}))
  if config.format == "csv":
    inputs = _file_inputs(config)
    return (root | "ReadCsv" >> ReadCsv(inputs, parse_column_map(config.csv_columns), allow),
            sorted({s for s, _, _ in inputs if s}))
  default_root, _ = _image_roots(config)
  if len(config.inputs) != 1:
    raise ValueError("--format voc takes exactly one --input: the VOC directory")
  voc = ReadVoc(config.inputs[0], default_root, use_image_sets=not config.split,
                allow_absolute=allow)
  return root | "ReadVoc" >> voc, sorted(voc.splits)


def _locate(ann: ImageAnnotation):
  try:
    yield ann.replace(size_bytes=paths.file_size(ann.uri))
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(ann.source, ann.key))


def _first_of_duplicates(element):
  """One example per image file: later annotations of the same file are reported."""
  uri, anns = element
  anns = sorted(anns, key=lambda a: (a.source, a.source_id, a.split or "", a.key))
  for dup in anns[1:]:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=dup.source, stage="parse", reason="duplicate_image", key=dup.key,
        message=f"{uri} is annotated again (source id {dup.source_id!r}); the annotation "
        f"from {anns[0].source} (source id {anns[0].source_id!r}) is used"))
  yield anns[0]


class PrepareImages(beam.PTransform):
  """PCollection[ImageAnnotation] -> (located, split-assigned, de-duplicated images, errors).

  In: images straight from a source. Out: every image with a split and a file size; images
  whose file is missing or annotated twice become ErrorRecords.
  """

  def __init__(self, fractions: Optional[Mapping[str, float]]):
    super().__init__()
    self.fractions = dict(fractions) if fractions else None

  def expand(self, images):
    fractions = self.fractions

    def assign(ann: ImageAnnotation) -> ImageAnnotation:
      if fractions:
        return ann.replace(split=sharding.split_for_key(ann.key, fractions))
      return ann if ann.split else ann.replace(split=DEFAULT_SPLIT)

    located = (images
               | "Locate" >> beam.FlatMap(_locate).with_outputs("errors", main="images"))
    unique = (located.images
              | "AssignSplit" >> beam.Map(assign)
              | "ByFile" >> beam.Map(lambda a: (a.uri, a))
              | "GroupByFile" >> beam.GroupByKey()
              | "Dedupe" >> beam.FlatMap(_first_of_duplicates).with_outputs(
                  "errors", main="images"))
    errors = (located.errors, unique.errors) | "Errors" >> beam.Flatten()
    return unique.images, errors


def _coco_label_map(pairs: Iterable[Tuple[str, int]]) -> Dict[str, int]:
  """COCO keeps its category ids; a name with two ids keeps the smallest."""
  result: Dict[str, int] = {}
  for name, category_id in sorted(set(pairs), key=lambda p: (p[1], p[0])):
    result.setdefault(name, category_id)
  return result


class BuildLabelMap(beam.PTransform):
  """Source output -> singleton PCollection[{name: id}].

  A user's label_map.pbtxt wins; else COCO category ids; else sorted names -> 1..N.
  """

  def __init__(self, source: SourceOutput, user_map: Optional[Mapping[str, int]]):
    super().__init__()
    self.source, self.user_map = source, user_map

  def expand(self, root):
    if self.user_map is not None:
      return root | "Given" >> beam.Create([dict(self.user_map)])
    if self.source.categories is not None:
      return (self.source.categories
              | "Categories" >> beam.combiners.ToList()
              | "FromCategories" >> beam.Map(_coco_label_map))
    return (self.source.images
            | "Names" >> beam.FlatMap(lambda a: [o.label for o in a.objects])
            | "Distinct" >> beam.Distinct()
            | "AllNames" >> beam.combiners.ToList()
            | "Number" >> beam.Map(label_maps.from_names))


def _merge_stats(items: Iterable[Dict]) -> Dict:
  items = list(items)
  merged = dict(items[0])
  classes: Dict[str, int] = {}
  for key in ("examples", "objects", "bytes", "clipped"):
    merged[key] = sum(i[key] for i in items)
  for item in items:
    for name, n in item["classes"].items():
      classes[name] = classes.get(name, 0) + n
  merged["classes"] = dict(sorted(classes.items()))
  return merged


class _Finalize(beam.DoFn):
  """Writes label_map.pbtxt, then manifest.json last: its presence marks a finished run."""

  def __init__(self, config: ConvertConfig, argv: Sequence[str]):
    self.config, self.argv = config, list(argv)

  def process(self, _, stats, error_counts, label_map, plans, error_files, beam_files):
    from apache_beam.io.filesystems import FileSystems
    output = self.config.output
    _write_atomic(paths.join(output, LABEL_MAP), label_maps.to_text(label_map).encode())
    splits: Dict[str, Any] = {}
    for s in sorted(stats, key=lambda s: (s["split"], s["shard"] if s["shard"] is not None else -1)):
      entry = splits.setdefault(s["split"], {"examples": 0, "objects": 0, "bytes": 0,
                                             "clipped_boxes": 0, "classes": {}, "shards": []})
      entry["examples"] += s["examples"]
      entry["objects"] += s["objects"]
      entry["bytes"] += s["bytes"]
      entry["clipped_boxes"] += s["clipped"]
      for name, n in s["classes"].items():
        entry["classes"][name] = entry["classes"].get(name, 0) + n
      if s["shard"] is not None:
        entry["shards"].append({"path": s["path"], "examples": s["examples"],
                                "objects": s["objects"], "bytes": s["bytes"]})
    for path in sorted(beam_files):
      name = posixpath.basename(path.replace("\\", "/"))
      split = name.rsplit("-", 3)[0]
      size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
      splits.setdefault(split, {"examples": 0, "objects": 0, "bytes": 0, "clipped_boxes": 0,
                                "classes": {}, "shards": []})
      splits[split]["shards"].append({"path": name, "examples": None, "objects": None,
                                      "bytes": size})
    for entry in splits.values():
      entry["num_shards"] = len(entry["shards"])
      entry["classes"] = dict(sorted(entry["classes"].items()))
    totals = {k: sum(e[k] for e in splits.values())
              for k in ("examples", "objects", "bytes", "clipped_boxes")}
    totals["images_seen"] = totals["examples"] + error_counts.get("__images_rejected__", 0)
    reasons = {k: v for k, v in sorted(error_counts.items()) if not k.startswith("__")}
    manifest = {
        "tool": "beam-tfrecord",
        "version": beam_tfrecord.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "schema": od_api.NAME,
        "format": self.config.format,
        "sink": self.config.sink,
        "args": self.argv,
        "config": dataclasses.asdict(self.config),
        "features": {k: {"dtype": d, "kind": kind} for k, (d, kind) in od_api.FEATURE_SPEC.items()},
        "label_map": dict(sorted(label_map.items(), key=lambda kv: kv[1])),
        "splits": dict(sorted(splits.items())),
        "totals": totals,
        "errors": {"count": sum(reasons.values()), "by_reason": reasons,
                   "files": sorted(posixpath.basename(f.replace("\\", "/")) for f in error_files)},
    }
    _write_atomic(paths.join(output, MANIFEST),
                  json.dumps(manifest, indent=2, ensure_ascii=False).encode("utf-8"))
    yield manifest


def _write_atomic(uri: str, data: bytes) -> None:
  from apache_beam.io.filesystems import FileSystems
  base = posixpath.basename(uri.replace("\\", "/"))
  tmp = paths.join(uri[: len(uri) - len(base)].rstrip("/\\") or ".", f".tmp-{base}")
  with FileSystems.create(tmp) as f:
    f.write(data)
  FileSystems.rename([tmp], [uri])


def _count_reason(error: ErrorRecord) -> List[str]:
  Metrics.counter("beam_tfrecord.errors", error.reason).inc()
  keys = [error.reason]
  if error.stage in ("locate", "read", "decode") or error.reason in (
      "duplicate_image", "not_in_split", "several_splits"):
    keys.append("__images_rejected__")
  return keys


def build(root, config: ConvertConfig, argv: Sequence[str] = ()) -> beam.PCollection:
  """Wire the whole conversion onto `root` (a Pipeline). Returns the manifest PCollection."""
  config.validate()
  user_map = label_maps.read(config.label_map) if config.label_map else None
  source, source_splits = read_source(root, config)
  fractions = config.split_fractions()
  images, prepare_errors = source.images | "Prepare" >> PrepareImages(fractions)
  label_map = beam.pvalue.AsSingleton(root | "LabelMap" >> BuildLabelMap(source, user_map))

  plans = (images
           | "KeyAndSize" >> beam.Map(lambda a: (a.split, (a.key, a.size_bytes or 0)))
           | "GroupBySplit" >> beam.GroupByKey()
           | "Plan" >> beam.MapTuple(lambda split, items: (split, sharding.plan_split(
               split, list(items), config.num_shards, config.shard_size_mb))))
  plans_side = beam.pvalue.AsDict(plans)

  if config.sink == "shards":
    stats, write_errors = images | "WriteShards" >> WriteShards(
        config.output, label_map, plans_side, config.bbox_policy)
    beam_files = root | "NoBeamFiles" >> beam.Create([])
  else:
    splits = list(fractions) if fractions else (source_splits or [DEFAULT_SPLIT])
    known = set(splits)
    checked = images | "CheckSplit" >> beam.FlatMap(
        lambda a: [a] if a.split in known else [beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=a.source, stage="parse", reason="unknown_split", key=a.key,
            message=f"split {a.split!r} is not one of {sorted(known)} known when the "
            "pipeline was built (the beam sink needs them up front)"))]
    ).with_outputs("errors", main="images")
    writer = WriteWithBeamSink(config.output, label_map, splits, config.num_shards,
                               config.bbox_policy)
    stats, encode_errors = checked.images | "WriteBeam" >> writer
    write_errors = (checked.errors, encode_errors) | "BeamErrors" >> beam.Flatten()
    beam_files = writer.written

  merged_stats = (stats
                  | "StatsKey" >> beam.Map(lambda s: ((s["split"], s["shard"]), s))
                  | "MergeStats" >> beam.CombinePerKey(_merge_stats)
                  | "StatsValues" >> beam.Values())
  errors = ((source.errors, prepare_errors, write_errors) | "AllErrors" >> beam.Flatten())
  error_files = (errors
                 | "ErrorJson" >> beam.Map(ErrorRecord.to_json)
                 | "WriteErrors" >> beam.io.WriteToText(
                     paths.join(config.output, "errors"), file_name_suffix=".jsonl",
                     shard_name_template="-SSSSS-of-NNNNN", num_shards=1))
  error_counts = (errors
                  | "Reasons" >> beam.FlatMap(_count_reason)
                  | "CountReasons" >> beam.combiners.Count.PerElement())
  return (root
          | "Once" >> beam.Create([None])
          | "Finalize" >> beam.ParDo(
              _Finalize(config, argv), beam.pvalue.AsList(merged_stats),
              beam.pvalue.AsDict(error_counts), label_map, plans_side,
              beam.pvalue.AsList(error_files), beam.pvalue.AsList(beam_files)))

"""build(pipeline, config): source -> group by image -> plan shards -> write -> finalize."""
from __future__ import annotations

import dataclasses
import datetime
import json
import posixpath
import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

import beam_tfrecord
from beam_tfrecord import label_map as label_maps
from beam_tfrecord import images as imaging
from beam_tfrecord import lock as locks
from beam_tfrecord import output as outputs
from beam_tfrecord import card, coders, packed, paths, progress, schemas, sharding
from beam_tfrecord.boxes import BBOX_POLICIES
from beam_tfrecord.encode import DEFAULT_MAX_IMAGE_BYTES, EncodeOptions
from beam_tfrecord.errors import UsageError
from beam_tfrecord.images import DEFAULT_MAX_PIXELS
from beam_tfrecord.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.orientation import EXIF_FRAMES
from beam_tfrecord.shard_writer import merge_stats, new_stats, pick_one
from beam_tfrecord.sink import WriteShards, WriteWithBeamSink
from beam_tfrecord.sources import SourceOutput, yolo
from beam_tfrecord.sources import csv as csv_source
from beam_tfrecord.sources.coco import ReadCoco
from beam_tfrecord.sources.csv import ReadCsv, parse_column_map
from beam_tfrecord.sources.folders import ReadFolders
from beam_tfrecord.sources.voc import ReadVoc
from beam_tfrecord.sources.yolo import ReadYolo

# Records that cross shuffles are encoded as tuples of their fields, not pickled (coders.py).
coders.register(ImageAnnotation)

FORMATS = ("auto", "coco", "voc", "csv", "yolo", "folders")
SCHEMAS = tuple(schemas.REGISTRY)
SINKS = ("shards", "beam")
MASK_FORMATS = ("coco", "yolo")  # formats whose annotations carry segmentations
DEFAULT_SPLIT = "train"
MANIFEST = outputs.MANIFEST
LABEL_MAP = outputs.LABEL_MAP
# What a finished run's manifest says ("outcome") and the exit code the CLI gives it.
OUTCOMES = {"ok": 0, "lost_records": 1, "lock_lost": 1, "no_images": 2, "error_rate": 3,
            "empty": 4}
LABELS_TXT = outputs.LABELS_TXT


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
  max_error_rate: Optional[float] = None  # fail the run above this; 0 = --strict
  max_pixels: int = DEFAULT_MAX_PIXELS
  exif_frame: str = "auto"
  verify_images: bool = False
  max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
  image_sets: Optional[str] = None        # voc: 'train,val' picks ImageSets/Main lists
  source_fingerprint: Optional[Dict[str, Any]] = None  # set by convert --if-changed
  schema: Optional[str] = None            # None: classification for image-level sources
  follow_symlinks: bool = False
  include_masks: bool = False
  max_side: Optional[int] = None          # preprocessing (images.Preprocess)
  resize: Optional[str] = None            # 'WxH'
  image_format: str = "keep"
  jpeg_quality: int = imaging.DEFAULT_JPEG_QUALITY
  records_per_shard: Optional[int] = None
  feature_names: Optional[str] = None     # 'OLD=NEW,...'
  shard_name_template: str = sharding.DEFAULT_SHARD_NAME_TEMPLATE
  writer_processes: int = 0               # 0: one per core on the in-process local runner

  def schema_option(self) -> str:
    return self.schema or schemas.DEFAULT

  def renames(self) -> Dict[str, str]:
    """--feature-names checked against the schema's keys (UsageError when wrong)."""
    spec = schemas.get(self.schema_option()).with_masks(self.include_masks).feature_spec
    return schemas.parse_feature_names(self.feature_names, spec)

  def encode_options(self) -> EncodeOptions:
    schema = schemas.get(self.schema_option())
    # a schema whose readers decode one format (coco-objects: JPEG) turns 'keep' into it
    image_format = (schema.image_format if schema.image_format and self.image_format == "keep"
                    else self.image_format)
    return EncodeOptions(bbox_policy=self.bbox_policy, max_pixels=self.max_pixels,
                         exif_frame=self.exif_frame, verify_images=self.verify_images,
                         max_image_bytes=self.max_image_bytes, include_masks=self.include_masks,
                         preprocess=imaging.Preprocess(
                             max_side=self.max_side,
                             resize=imaging.parse_size(self.resize) if self.resize else None,
                             image_format=image_format, jpeg_quality=self.jpeg_quality),
                         schema=schema.option, renames=tuple(sorted(self.renames().items())))

  def validate(self) -> None:
    if self.format not in FORMATS:
      raise ValueError(f"--format must be one of {', '.join(FORMATS)}")
    if not self.inputs:
      raise ValueError("give at least one --input")
    if any(c in self.output for c in "[]*?"):
      # Beam's own file sinks (WriteToText for the error report) glob their temporary paths
      raise ValueError(f"--output {self.output!r} contains one of [ ] * ?, which Beam's file "
                       "sinks read as a pattern; choose a directory name without them")
    if self.sink not in SINKS:
      raise ValueError(f"--sink must be one of {', '.join(SINKS)}")
    if self.num_shards is not None and self.num_shards < 1:
      raise ValueError("--num-shards must be at least 1")
    if self.num_shards and self.shard_size_mb:
      raise ValueError("give --num-shards or --shard-size-mb, not both")
    if self.shard_size_mb is not None and self.shard_size_mb <= 0:
      raise ValueError("--shard-size-mb must be positive")
    if self.records_per_shard is not None and (
        self.records_per_shard < 1 or self.num_shards or self.shard_size_mb):
      raise ValueError("--records-per-shard must be at least 1, without --num-shards or "
                       "--shard-size-mb")
    if self.sink == "beam" and (self.records_per_shard or self.shard_name_template !=
                                sharding.DEFAULT_SHARD_NAME_TEMPLATE):
      raise ValueError("--records-per-shard and --shard-name-template need --sink shards "
                       "(Beam's WriteToTFRecord names and fills its shards itself)")
    if self.shard_name_template != sharding.DEFAULT_SHARD_NAME_TEMPLATE:
      sharding.template_fields(self.shard_name_template)
    if self.split:
      sharding.parse_split_fractions(self.split)
    for item in list(self.inputs) + list(self.images):
      split, _ = paths.parse_assignment(item)
      if split:
        sharding.check_split_name(split)
    if self.bbox_policy not in BBOX_POLICIES:
      raise ValueError(f"--bbox-policy must be one of {', '.join(BBOX_POLICIES)}")
    if self.exif_frame not in EXIF_FRAMES:
      raise ValueError(f"--exif-frame must be one of {', '.join(EXIF_FRAMES)}")
    if self.max_error_rate is not None and not 0 <= self.max_error_rate <= 1:
      raise ValueError("--max-error-rate must be within [0, 1]")
    if self.max_pixels < 1:
      raise ValueError("--max-pixels must be positive")
    if self.max_image_bytes < 1:
      raise ValueError("--max-image-bytes must be positive")
    if self.image_sets is not None and self.format != "voc":
      raise ValueError("--image-sets applies to --format voc only")
    if self.image_sets is not None and self.split:
      raise ValueError("give --image-sets or --split, not both")
    if self.schema is not None:
      schemas.get(self.schema)
    parse_column_map(self.csv_columns)
    if self.max_side is not None and self.resize:
      raise ValueError("give --max-side or --resize, not both")
    if self.max_side is not None and self.max_side < 1:
      raise ValueError("--max-side must be at least 1")
    if self.resize:
      imaging.parse_size(self.resize)
    if self.image_format not in imaging.IMAGE_FORMATS:
      raise ValueError(f"--image-format must be one of {', '.join(imaging.IMAGE_FORMATS)}")
    if not 1 <= self.jpeg_quality <= 100:
      raise ValueError("--jpeg-quality must be within 1..100")
    if self.writer_processes < 0:
      raise ValueError("--writer-processes must be 0 (automatic) or more")

  def check_resolved(self) -> None:
    """The checks that need the format and the schema decided (see resolve): UsageError."""
    schema = schemas.get(self.schema_option())
    if self.include_masks and not schema.masks:
      raise UsageError(f"--include-masks writes image/object/mask of the {schemas.DEFAULT} "
                       f"schema, not {schema.option}")
    if self.include_masks and self.format not in MASK_FORMATS:
      raise UsageError(f"--include-masks needs segmentations: format {self.format} has none "
                       f"(use one of {', '.join(MASK_FORMATS)})")
    if schema.image_format and self.image_format not in ("keep", schema.image_format):
      raise UsageError(f"--schema {schema.option} writes {schema.image_format.upper()} (what "
                       f"its readers decode); --image-format {self.image_format} does not fit "
                       "it")
    self.renames()
    if self.shard_name_template != sharding.DEFAULT_SHARD_NAME_TEMPLATE:
      splits = possible_splits(self)
      sharding.check_template(self.shard_name_template, splits, self.num_shards)
      sharding.check_names(self.shard_name_template, splits, self.num_shards)

  def split_fractions(self) -> Optional[Dict[str, float]]:
    return sharding.parse_split_fractions(self.split) if self.split else None


def image_roots(config: ConvertConfig) -> Tuple[Optional[str], Dict[str, str]]:
  """(default image root, {split: image root}) from the --images options."""
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
  default_root, per_split = image_roots(config)
  result = []
  for item in config.inputs:
    split, uri = paths.parse_assignment(item)
    root = per_split.get(split or "", default_root)
    if root is None:
      root = posixpath.dirname(uri) if paths.is_remote(uri) else \
          __import__("os").path.dirname(uri) or "."
    result.append((split, uri, root))
  return result


def possible_splits(config: ConvertConfig) -> Optional[set]:
  """The splits a run can produce, when known before reading the data (None: a CSV's split
  column can name any; YOLO and class folders are not looked at here)."""
  if config.split:
    return set(config.split_fractions())
  if config.format == "coco":
    return {split or DEFAULT_SPLIT for split, _, _ in _file_inputs(config)}
  if config.format == "voc":
    from beam_tfrecord.sources import voc
    assigned = [paths.parse_assignment(item) for item in config.inputs]
    if len(assigned) != 1 or assigned[0][0]:
      return {split or DEFAULT_SPLIT for split, _ in assigned}
    if config.image_sets:
      return set(voc.split_names(voc.parse_image_sets(config.image_sets)))
    if voc.is_flat(config.inputs[0]):
      return {DEFAULT_SPLIT}
    return set(voc.split_names(voc.split_files(config.inputs[0]))) or {DEFAULT_SPLIT}
  return None


def resolve(config: ConvertConfig) -> ConvertConfig:
  """A config with --format auto decided (detect.py) and the schema chosen: classification
  for image-level sources (class folders, classification CSV listings), else od-api.
  Raises UsageError when the format cannot be decided (preflight.check does the rest)."""
  if config.format == "auto":
    from beam_tfrecord import detect
    found = detect.detect(config.inputs)
    config = dataclasses.replace(config, format=found.format, inputs=list(found.inputs))
  if config.schema is None:
    image_level = config.format == "folders" or (config.format == "csv" and all(
        csv_source.is_listing(uri, parse_column_map(config.csv_columns))
        for _, uri, _ in _file_inputs(config)))
    config = dataclasses.replace(config, schema="classification" if image_level
                                 else schemas.DEFAULT)
  try:
    config.check_resolved()
  except ValueError as e:
    raise UsageError(str(e)) from None
  return config


def read_source(root, config: ConvertConfig) -> Tuple[SourceOutput, List[str]]:
  """The format's source transform, and the split names known before running."""
  allow, follow = config.allow_absolute_paths, config.follow_symlinks
  first_id = schemas.from_options(config.encode_options()).first_id
  if config.format == "coco":
    inputs = _file_inputs(config)
    return (root | "ReadCoco" >> ReadCoco(inputs, allow, follow,
                                          drop_background=not config.label_map,
                                          include_masks=config.include_masks,
                                          join_in_worker=in_process(root)),
            sorted({s for s, _, _ in inputs if s}))
  if config.format == "csv":
    inputs = _file_inputs(config)
    return (root | "ReadCsv" >> ReadCsv(inputs, parse_column_map(config.csv_columns), allow,
                                        follow),
            sorted({s for s, _, _ in inputs if s}))
  assigned = [paths.parse_assignment(item) for item in config.inputs]
  if config.format == "yolo":
    datasets = [yolo.load(uri, split) for split, uri in assigned]
    source = root | "ReadYolo" >> ReadYolo(datasets, first_id, allow, follow,
                                           include_masks=config.include_masks)
    return source, sorted({s for d in datasets for s, _ in d.splits})
  if config.format == "folders":
    reader = ReadFolders(assigned, first_id, allow, follow)
    return root | "ReadFolders" >> reader, reader.splits
  default_root, per_split = image_roots(config)
  if len(assigned) == 1 and not assigned[0][0]:
    from beam_tfrecord.sources.voc import parse_image_sets
    voc = ReadVoc(config.inputs[0], default_root, use_image_sets=not config.split,
                  allow_absolute=allow, follow_symlinks=follow,
                  image_sets=parse_image_sets(config.image_sets) if config.image_sets else None)
    return root | "ReadVoc" >> voc, sorted(voc.splits)
  if not all(split for split, _ in assigned):
    raise ValueError("--format voc takes one --input (a VOC directory or a folder of XMLs), "
                     "or one SPLIT=DIR per split")
  per_folder = [root | f"ReadVoc[{split}]" >> ReadVoc(
      uri, per_split.get(split, default_root), allow_absolute=allow, follow_symlinks=follow,
      split=split) for split, uri in assigned]
  return (SourceOutput(
      images=tuple(o.images for o in per_folder) | "VocImages" >> beam.Flatten(),
      errors=tuple(o.errors for o in per_folder) | "VocErrors" >> beam.Flatten()),
      sorted(split for split, _ in assigned))


def _locate_and_assign(ann: ImageAnnotation, fractions: Optional[Mapping[str, float]],
                       size: Any = None):
  """Fill in the file size and the split, or report the missing file (one fused step).
  `size` is the file size or InputError when it was looked up already (_locate_batch), or
  the annotation's own size_bytes when its source saw the file (COCO's paths.resolve_sized)."""
  outputs.kill_point("parse")
  try:
    if size is None:
      size = ann.size_bytes if ann.size_bytes is not None else paths.file_size(ann.uri)
    if isinstance(size, InputError):
      raise size
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(ann.source, ann.key))
    return
  if fractions:
    split = sharding.split_for_key(ann.key, fractions)
  else:
    split = ann.split or DEFAULT_SPLIT
  yield ann if (size, split) == (ann.size_bytes, ann.split) else ann.replace(size_bytes=size,
                                                                            split=split)


REMOTE_LOCATE_THREADS = 16


def _size_or_error(uri: str) -> Any:
  try:
    return paths.file_size(uri)
  except InputError as e:
    return e


def _locate_batch(batch: Sequence[ImageAnnotation], fractions: Optional[Mapping[str, float]]):
  """_locate_and_assign over a batch, the sizes looked up concurrently: on an object store
  each lookup is a round trip, and one at a time they cost as much as the reads."""
  import concurrent.futures
  with concurrent.futures.ThreadPoolExecutor(REMOTE_LOCATE_THREADS) as pool:
    sizes = list(pool.map(_size_or_error, [a.uri for a in batch]))
  for ann, size in zip(batch, sizes):
    yield from _locate_and_assign(ann, fractions, size)


def _first_of_duplicates(uri: str, anns: Iterable[ImageAnnotation]):
  kept, errors = pick_one(uri, anns)
  for error in errors:
    yield beam.pvalue.TaggedOutput("errors", error)
  yield kept


class PrepareImages(beam.PTransform):
  """PCollection[ImageAnnotation] -> (located, split-assigned images, errors).

  In: images straight from a source. Out: every image with a split and a file size; images
  whose file is missing become ErrorRecords. With dedupe, a file annotated twice keeps one
  annotation here (a shuffle by file); the shard writer does the same inside its own grouping
  instead (sharding.ShardPlan.duplicates), which saves that shuffle.
  """

  def __init__(self, fractions: Optional[Mapping[str, float]], dedupe: bool = True,
               remote: bool = False):
    super().__init__()
    self.fractions = dict(fractions) if fractions else None
    self.dedupe = dedupe
    self.remote = remote  # images on an object store: look sizes up in concurrent batches

  def expand(self, images):
    if self.remote:
      images = images | "Batch" >> beam.BatchElements(min_batch_size=256, max_batch_size=256)
      locate = beam.FlatMap(_locate_batch, self.fractions)
    else:
      locate = beam.FlatMap(_locate_and_assign, self.fractions)
    located = (images
               | "Locate" >> locate.with_output_types(ImageAnnotation).with_outputs(
                   "errors", main="images"))
    if not self.dedupe:
      return located.images, located.errors
    unique = (located.images
              | "ByFile" >> beam.Map(lambda a: (a.uri, a))
              | "GroupByFile" >> beam.GroupByKey()
              | "Dedupe" >> beam.FlatMapTuple(_first_of_duplicates).with_outputs(
                  "errors", main="images"))
    errors = (located.errors, unique.errors) | "Errors" >> beam.Flatten()
    return unique.images, errors


class _PlanFn(beam.CombineFn):
  """packed.Packed -> sharding.ShardPlan, combined ({uri: winner}) rather than gathered:
  the runner lifts the combine before its shuffle, so one accumulator per bundle crosses it.
  Each image's planned records (the schema's) are what --records-per-shard counts."""

  def __init__(self, num_shards: Optional[int], shard_size_mb: Optional[float],
               records_per_shard: Optional[int] = None):
    self.num_shards, self.shard_size_mb = num_shards, shard_size_mb
    self.records_per_shard = records_per_shard

  def create_accumulator(self) -> Dict[str, sharding.PlanEntry]:
    return {}

  def add_input(self, acc, image: packed.Packed):
    return sharding.add_plan_entry(acc, image[packed.URI], packed.plan_entry(image))

  def merge_accumulators(self, accs):
    accs = iter(accs)
    merged = next(accs)
    for acc in accs:
      for uri, entry in acc.items():
        sharding.add_plan_entry(merged, uri, entry)
    return merged

  def extract_output(self, acc) -> sharding.ShardPlan:
    return sharding.make_plan(acc, self.num_shards, self.shard_size_mb, self.records_per_shard)


class PlanShards(beam.PTransform):
  """PCollection[packed.Packed] (split and size set) -> PCollection of one sharding.ShardPlan.

  One combine over all images (_PlanFn). The plan also records each split's planned image
  count in the run directory for the progress line (progress.py), and checks the names of all
  shards together (--shard-name-template) before any is written, since the writer waits for
  the plan: a clash raises, failing the run with nothing written.
  """

  def __init__(self, num_shards: Optional[int], shard_size_mb: Optional[float], staging: str,
               records_per_shard: Optional[int] = None,
               template: str = sharding.DEFAULT_SHARD_NAME_TEMPLATE):
    super().__init__()
    self.combine = _PlanFn(num_shards, shard_size_mb, records_per_shard)
    self.staging, self.template = staging, template

  def expand(self, images):
    staging, template = self.staging, self.template

    def planned(plan: sharding.ShardPlan) -> sharding.ShardPlan:
      for split, split_plan in plan.splits.items():
        progress.record_planned(staging, split, split_plan.count)
      if template != sharding.DEFAULT_SHARD_NAME_TEMPLATE:
        sharding.shard_names(list(plan.splits.values()), template)
      return plan

    return (images
            | "Combine" >> beam.CombineGlobally(self.combine)
            | "Planned" >> beam.Map(planned))


def _coco_label_map(pairs: Iterable[Tuple[str, int]]) -> Dict[str, int]:
  """COCO keeps its category ids; a name with two ids keeps the smallest."""
  result: Dict[str, int] = {}
  for name, category_id in sorted(set(pairs), key=lambda p: (p[1], p[0])):
    result.setdefault(name, category_id)
  return result


class BuildLabelMap(beam.PTransform):
  """Source output -> singleton PCollection[{name: id}].

  A user's label_map.pbtxt wins; else the source's ids (COCO category ids, YOLO's class
  order, class folders); else sorted names (of objects and image-level labels) numbered
  from `first_id` (1 for the TF OD API, where 0 is background; 0 for classification).
  """

  def __init__(self, source: SourceOutput, user_map: Optional[Mapping[str, int]],
               first_id: int = 1):
    super().__init__()
    self.source, self.user_map = source, user_map
    self.first_id = first_id

  def expand(self, root):
    if self.user_map is not None:
      return root | "Given" >> beam.Create([dict(self.user_map)])
    if self.source.categories is not None:
      return (self.source.categories
              | "Categories" >> beam.combiners.ToList()
              | "FromCategories" >> beam.Map(_coco_label_map))
    first_id = self.first_id
    return (self.source.images
            | "Names" >> beam.FlatMap(lambda a: [o.label for o in a.objects] + list(a.labels))
            | "Distinct" >> beam.Distinct()
            | "AllNames" >> beam.combiners.ToList()
            | "Number" >> beam.Map(label_maps.from_names, first_id))


def error_rate(images: int, levels: Mapping[str, int]) -> float:
  """Rejections per image seen: file, image and object errors over (converted + rejected
  images). Warnings (the image was converted) do not count."""
  rejected = sum(n for level, n in levels.items() if level != "warning")
  seen = images + levels.get("image", 0)
  return rejected / seen if seen else (1.0 if rejected else 0.0)


def _split_entries(stats: Sequence[Dict], beam_files: Sequence[str]) -> Dict[str, Dict]:
  """Manifest entries per split: shard stats merged (sink.merge_stats) plus the shard list."""
  by_split: Dict[str, List[Dict]] = {}
  for s in sorted(stats, key=lambda s: (s["split"], -1 if s["shard"] is None else s["shard"])):
    by_split.setdefault(s["split"], []).append(s)
  shard_files: Dict[str, List[Dict]] = {
      split: [{"path": s["path"], "examples": s["examples"], "objects": s["objects"],
               "bytes": s["bytes"]} for s in items if s["shard"] is not None]
      for split, items in by_split.items()}
  for path in sorted(beam_files):  # --sink beam: per-file counts are unknown
    name = posixpath.basename(path.replace("\\", "/"))
    shard_files.setdefault(name.rsplit("-", 3)[0], []).append(
        {"path": name, "examples": None, "objects": None, "bytes": paths.size_of(path)})
  splits = {}
  for split, files in sorted(shard_files.items()):
    total = merge_stats(by_split.get(split) or [new_stats(split, None, "")])
    splits[split] = {
        "examples": total["examples"], "images": total["images"], "objects": total["objects"],
        "bytes": sum(f["bytes"] for f in files) if beam_files else total["bytes"],
        "clipped_boxes": total["clipped"], "reoriented_images": total["reoriented"],
        "classes": total["classes"], "shards": files, "num_shards": len(files)}
  return splits


def outcome_of(totals: Mapping[str, int], levels: Mapping[str, int], rate: float,
               limit: Optional[float], lost: str) -> Tuple[str, str]:
  """(outcome, status) of a finished run; status is 'ok' or 'failed: why'. Nothing written
  is never a success: with no image even seen it is 'no_images', else 'empty'."""
  if lost:
    return "lost_records", (f"failed: the runner lost records ({lost}); the output is "
                            "incomplete. Beam's multi_threading local mode did this under load "
                            "in our measurements")
  if not totals["examples"]:
    if not levels.get("image"):
      return "no_images", ("failed: no images found in the input (see errors-*.jsonl for "
                           "annotation files that could not be read)")
    return "empty", (f"failed: nothing was written: all {levels['image']} images were "
                     "rejected (see errors-*.jsonl)")
  if limit is not None and rate > limit:
    rejected = sum(n for level, n in levels.items() if level != "warning")
    return "error_rate", (f"failed: error rate {rate:.4g} exceeds --max-error-rate {limit:g} "
                          f"({rejected} rejected inputs, see errors-*.jsonl)")
  return "ok", "ok"


def input_paths(config: "ConvertConfig") -> List[str]:
  """Every path the run reads: annotation inputs, image roots, the label map."""
  found = [paths.parse_assignment(i)[1] for i in list(config.inputs) + list(config.images)]
  return found + ([config.label_map] if config.label_map else [])


class _Finalize(beam.DoFn):
  """Writes label_map.pbtxt and manifest.json (last) into the run directory; a successful
  run then replaces the output (output.commit), a failed one stays there as its report."""

  def __init__(self, config: ConvertConfig, argv: Sequence[str], run_directory: str,
               run_id: str):
    self.config, self.argv = config, list(argv)
    self.run_directory, self.run_id = run_directory, run_id

  def process(self, _, stats, error_counts, label_map, error_files, beam_files, plan):
    from apache_beam.io.filesystems import FileSystems
    run_directory = self.run_directory
    if not FileSystems.exists(run_directory) and not paths.is_remote(run_directory):
      FileSystems.mkdirs(run_directory)  # nothing was written: no image, no error
    _name_shards(run_directory, stats)
    outputs.write_atomic(paths.join(run_directory, LABEL_MAP),
                         label_maps.to_text(label_map).encode())
    schema = schemas.from_options(self.config.encode_options())
    if schema.first_id == 0:
      outputs.write_atomic(paths.join(run_directory, LABELS_TXT),
                           label_maps.to_lines(label_map).encode())
    splits = _split_entries(stats, beam_files)
    totals = {k: sum(e[k] for e in splits.values())
              for k in ("examples", "images", "objects", "bytes", "clipped_boxes",
                        "reoriented_images")}
    reasons = {k: v for k, v in sorted(error_counts.items()) if not k.startswith("level:")}
    levels = {k[6:]: v for k, v in sorted(error_counts.items()) if k.startswith("level:")}
    rate = error_rate(totals["images"], levels)  # per image: records may be several or none
    outcome, status = outcome_of(totals, levels, rate, self.config.max_error_rate,
                                 _lost_records(plan.splits, stats))
    if outcome == "ok" and not locks.held_by(self.config.output, self.run_id):
      outcome, status = "lock_lost", ("failed: another run took over the output lock "
                                      "(--break-lock) while this one ran")
    files = sorted({n for n in outputs.entries(run_directory) if not n.startswith(".")
                    and not n.startswith("beam-temp")} | {card.NAME, MANIFEST})
    manifest = {
        "tool": "beam-tfrecord",
        "version": beam_tfrecord.__version__,
        "status": status,
        "outcome": outcome,
        "run_id": self.run_id,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "schema": schema.name,
        "format": self.config.format,
        "sink": self.config.sink,
        "args": self.argv,
        "source_fingerprint": self.config.source_fingerprint,
        "config": dataclasses.asdict(self.config),
        "features": schema.manifest_features(),
        "label_map": dict(sorted(label_map.items(), key=lambda kv: kv[1])),
        "splits": splits,
        "totals": totals,
        "errors": {"count": sum(reasons.values()), "rate": rate, "by_level": levels,
                   "by_reason": reasons,
                   "files": sorted(posixpath.basename(f.replace("\\", "/")) for f in error_files)},
        "files": files,
    }
    outputs.write_atomic(paths.join(run_directory, card.NAME),
                         card.render(manifest).encode("utf-8"))
    outputs.write_atomic(paths.join(run_directory, MANIFEST),
                         json.dumps(manifest, indent=2, ensure_ascii=False).encode("utf-8"))
    outputs.kill_point("finalize")
    if outcome == "ok":
      protected = [n for n in (outputs.name_inside(p, self.config.output)
                               for p in input_paths(self.config)) if n]
      outputs.commit(self.config.output, run_directory, manifest, protected)
    # else: the run directory stays as the failed run's report, shards included, so that
    # `verify`/`inspect` can look at it; the next run into this output removes it
    yield manifest


def _name_shards(run_directory: str, stats: Sequence[Dict]) -> None:
  """--shard-name-template: shards were written under unique default names (their final
  names need {count}); name them inside the run directory, before the manifest lists the
  run's files, so that output.commit moves them and --overwrite owns them by these names.
  Idempotent (a retried finalize finds them named)."""
  from apache_beam.io.filesystems import FileSystems
  shards = [s for s in stats if s["shard"] is not None]
  finals = [s["path"] for s in shards]
  if len(set(finals)) != len(finals):  # a {count} made two names equal: move nothing
    raise RuntimeError(f"shard names clash after writing: {sorted(finals)}")
  moves = [(paths.join(run_directory, s["staged"]), paths.join(run_directory, s["path"]))
           for s in shards if s.get("staged")]
  moves = [(src, dst) for src, dst in moves if FileSystems.exists(src)]
  taken = {src for src, _ in moves} & {dst for _, dst in moves}
  if taken:  # a final name is another shard's staging name: renaming would overwrite it
    raise RuntimeError(f"shard names clash with staging names: {sorted(taken)}")
  if moves:
    FileSystems.rename([src for src, _ in moves], [dst for _, dst in moves])


def _lost_records(plans: Mapping[str, sharding.SplitPlan], stats: Sequence[Dict]) -> str:
  """'' when every planned image was written or rejected, else what is missing per split."""
  done: Dict[str, int] = {}
  for s in stats:
    # images, not examples: a per-object schema writes several records per image
    done[s["split"]] = done.get(s["split"], 0) + s.get("images", s["examples"]) + s["rejected"]
  return ", ".join(f"split {split}: {plan.count} planned, {done.get(split, 0)} written or "
                   f"rejected" for split, plan in sorted(plans.items())
                   if done.get(split, 0) != plan.count)


def _count_keys(error: ErrorRecord) -> List[str]:
  """Counter names for one error: its reason and its level (counted in Beam metrics too)."""
  Metrics.counter("beam_tfrecord.errors", error.reason).inc()
  Metrics.counter("beam_tfrecord.error_levels", error.level).inc()
  return [error.reason, f"level:{error.level}"]


# Runners that run the whole pipeline in this process, one stage at a time (the CLI's
# default, and what the DirectRunner falls back to offline).
IN_PROCESS_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner")


def in_process(root) -> bool:
  """True when the pipeline runs on the in-process local runner in its in_memory mode: one
  stage at a time, on one thread, so that a shuffle only costs and never spreads work."""
  from apache_beam.options.pipeline_options import DirectOptions
  return (type(root.runner).__name__ in IN_PROCESS_RUNNERS and
          root.options.view_as(DirectOptions).direct_running_mode == "in_memory")


def writer_processes(root, config: ConvertConfig) -> Tuple[int, int]:
  """(processes that write shards, fewest images per process): --writer-processes N is used
  as given; by default one per core on the in-process local runner in its in_memory mode (it
  writes the shards on one thread) when the run is big enough to pay for starting them, else 1:
  distributed runners and Beam's multi-worker modes spread shards over their own workers."""
  if config.writer_processes:
    return config.writer_processes, 0
  from beam_tfrecord.shard_writer import MIN_IMAGES_PER_PROCESS, local_processes
  if in_process(root):
    return local_processes(), MIN_IMAGES_PER_PROCESS
  return 1, 0


def build(root, config: ConvertConfig, argv: Sequence[str] = (),
          run_id: Optional[str] = None) -> beam.PCollection:
  """Wire the whole conversion onto `root` (a Pipeline). Returns the manifest PCollection.
  Raises UsageError for problems found before running (see resolve)."""
  config.validate()
  config = resolve(config)
  paths.forget_roots()  # this run sees the image roots as they are now
  run_id = run_id or uuid.uuid4().hex
  staging = outputs.run_dir(config.output, run_id)
  options = config.encode_options()
  schema = schemas.from_options(options)
  user_map = (label_maps.read(config.label_map, min_id=schema.first_id)
              if config.label_map else None)
  source, source_splits = read_source(root, config)
  fractions = config.split_fractions()
  remote = config.allow_absolute_paths or any(
      paths.is_remote(paths.parse_assignment(item)[1]) for item in config.images + config.inputs)
  images, prepare_errors = source.images | "Prepare" >> PrepareImages(
      fractions, dedupe=config.sink != "shards", remote=remote)
  label_map = beam.pvalue.AsSingleton(
      root | "LabelMap" >> BuildLabelMap(source, user_map, schema.first_id))

  template = config.shard_name_template
  packed_images = images | "Pack" >> beam.Map(
      lambda ann: packed.pack(ann, schema.planned_records(ann)))
  plan = beam.pvalue.AsSingleton(packed_images | "Plan" >> PlanShards(
      config.num_shards, config.shard_size_mb, staging, config.records_per_shard, template))

  if config.sink == "shards":
    stats, write_errors = packed_images | "WriteShards" >> WriteShards(
        staging, label_map, plan, options, template, *writer_processes(root, config))
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
    writer = WriteWithBeamSink(staging, label_map, splits, config.num_shards, options)
    stats, encode_errors = checked.images | "WriteBeam" >> writer
    write_errors = (checked.errors, encode_errors) | "BeamErrors" >> beam.Flatten()
    beam_files = writer.written

  merged_stats = (stats
                  | "StatsKey" >> beam.Map(lambda s: ((s["split"], s["shard"]), s))
                  | "MergeStats" >> beam.CombinePerKey(merge_stats)
                  | "StatsValues" >> beam.Values())
  errors = ((source.errors, prepare_errors, write_errors) | "AllErrors" >> beam.Flatten())
  error_files = (errors
                 | "ErrorJson" >> beam.Map(ErrorRecord.to_json)
                 | "WriteErrors" >> beam.io.WriteToText(
                     paths.join(staging, "errors"), file_name_suffix=".jsonl",
                     shard_name_template="-SSSSS-of-NNNNN", num_shards=1))
  error_counts = (errors
                  | "Reasons" >> beam.FlatMap(_count_keys)
                  | "CountReasons" >> beam.combiners.Count.PerElement())
  return (root
          | "Once" >> beam.Create([None])
          | "Finalize" >> beam.ParDo(
              _Finalize(config, argv, staging, run_id), beam.pvalue.AsList(merged_stats),
              beam.pvalue.AsDict(error_counts), label_map,
              beam.pvalue.AsList(error_files), beam.pvalue.AsList(beam_files), plan))

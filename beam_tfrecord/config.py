"""The conversion's settings: ConvertConfig (frozen once built), its validation, and format
resolution (--format auto, the default schema). Beam-free: the CLI imports it for --help."""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import posixpath
from typing import Any, Callable, Dict, List, Optional, Tuple

from beam_tfrecord import schemas
from beam_tfrecord.errors import UsageError
from beam_tfrecord.finalize import tfds_layout
from beam_tfrecord.plan import naming
from beam_tfrecord.prepare import splitting
from beam_tfrecord.records.boxes import BBOX_POLICIES
from beam_tfrecord.sources import registry
from beam_tfrecord.storage import files, paths, record_files
from beam_tfrecord.storage.files import DEFAULT_MAX_IMAGE_BYTES, check_store
from beam_tfrecord.write import images as imaging
from beam_tfrecord.write.encode import EncodeOptions
from beam_tfrecord.write.images import DEFAULT_MAX_PIXELS
from beam_tfrecord.write.orientation import EXIF_FRAMES

FORMATS = ("auto", *registry.FORMATS)
# The longest file name (one path component) a file system takes, in bytes: ext4, XFS, Btrfs,
# APFS. An output on gs:// is held to it too, so that it can be copied to a disk.
NAME_MAX = 255
# What a kept shard's temporary name adds to its name (finalize/output.share_file: '.link-PID',
# '.copy') when --append links an earlier version's files
LINK_SUFFIX_BYTES = 16
LAYOUTS = ("flat", "tfds")
SCHEMAS = tuple(schemas.REGISTRY)
SINKS = ("shards", "beam")


# What each setting does to an output: the one tag from which --if-changed's fingerprint,
# --append's re-encode rule and the manifest's record of the run are all derived, so a new
# setting cannot be forgotten by one of them (tests/test_config_tags.py fails on a field
# without a tag).
RECORDS = "records"  # shapes an image's records or the files' names: a change re-encodes all
INPUTS = "inputs"    # selects what is read and where it goes (splits, shards, error policy):
                     # a change is a new fingerprint; records of unchanged images stay valid
RUNTIME = "runtime"  # only how or where this run goes: never a reason to convert again
KINDS = (RECORDS, INPUTS, RUNTIME)


def setting(kind: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING):
  """A ConvertConfig field tagged with its kind (one of KINDS)."""
  assert kind in KINDS, kind
  return dataclasses.field(default=default, default_factory=factory, metadata={"kind": kind})


def names_of(kind: str) -> Tuple[str, ...]:
  """The ConvertConfig fields of one kind, in declaration order."""
  return tuple(f.name for f in dataclasses.fields(ConvertConfig) if f.metadata["kind"] == kind)


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
  """Everything a conversion needs besides Beam's own pipeline options. Frozen: a changed
  setting is a new config (dataclasses.replace), so a validated config stays validated.

  Fields hold the options as given (what the manifest records and the fingerprint digests);
  their typed values (columns, selection, fractions, resize_size, renamed, encode) are parsed
  once, on first use, and cached on this config: nothing parses an option string again."""
  format: str = setting(RECORDS)
  inputs: List[str] = setting(INPUTS)      # [SPLIT=]URI of annotation files (VOC: the VOC root)
  output: str = setting(RUNTIME)
  images: List[str] = setting(INPUTS, factory=list)            # [SPLIT=]image root
  label_map: Optional[str] = setting(RECORDS, None)
  split: Optional[str] = setting(INPUTS, None)  # 'train=0.8,val=0.2': hash-assigned splits
  num_shards: Optional[int] = setting(INPUTS, None)
  shard_size_mb: Optional[float] = setting(INPUTS, None)
  sink: str = setting(RECORDS, "shards")
  csv_columns: Optional[str] = setting(RECORDS, None)
  csv_normalized: bool = setting(RECORDS, False)  # csv: coordinates are fractions of the size
  bbox_policy: str = setting(RECORDS, "clip")
  allow_absolute_paths: bool = setting(RECORDS, False)
  overwrite: bool = setting(RUNTIME, False)
  max_error_rate: Optional[float] = setting(INPUTS, None)  # fail the run above; 0 = --strict
  max_pixels: int = setting(RECORDS, DEFAULT_MAX_PIXELS)
  exif_frame: str = setting(RECORDS, "auto")
  verify_images: bool = setting(RECORDS, False)
  max_image_bytes: int = setting(RECORDS, DEFAULT_MAX_IMAGE_BYTES)
  image_sets: Optional[str] = setting(INPUTS, None)  # voc: 'train,val' picks ImageSets/Main
  source_fingerprint: Optional[Dict[str, Any]] = setting(RUNTIME, None)  # --if-changed
  schema: Optional[str] = setting(RECORDS, None)  # None: classification for image-level
  follow_symlinks: bool = setting(RECORDS, False)
  include_masks: bool = setting(RECORDS, False)
  max_side: Optional[int] = setting(RECORDS, None)         # preprocessing (images.Preprocess)
  resize: Optional[str] = setting(RECORDS, None)           # 'WxH'
  image_format: str = setting(RECORDS, "keep")
  jpeg_quality: int = setting(RECORDS, imaging.DEFAULT_JPEG_QUALITY)
  records_per_shard: Optional[int] = setting(RECORDS, None)
  feature_names: Optional[str] = setting(RECORDS, None)    # 'OLD=NEW,...'
  shard_name_template: str = setting(RECORDS, naming.DEFAULT_SHARD_NAME_TEMPLATE)
  file_format: str = setting(RECORDS, record_files.TFRECORD)  # or array_record (Grain, TFDS)
  index_files: bool = setting(RECORDS, False)  # an index per TFRecord shard (DALI, tfrecord)
  writer_processes: int = setting(RUNTIME, 0)  # 0: one per core on the in-process runner
  classes: Optional[str] = setting(RECORDS, None)          # 'a,b': keep only these classes
  class_map: Optional[str] = setting(RECORDS, None)        # 'old=new,...': rename or merge
  classes_file: Optional[str] = setting(RECORDS, None)     # yolo-keras: one class name a line
  class_descriptions: Optional[str] = setting(RECORDS, None)  # openimages: LabelName,Display
  layout: str = setting(RECORDS, "flat")   # tfds: OUT/NAME/VERSION/ as TFDS writes it
  dataset_name: Optional[str] = setting(RECORDS, None)     # --layout tfds
  dataset_version: str = setting(RECORDS, "1.0.0")
  tfds_root: Optional[str] = setting(RUNTIME, None)  # --layout tfds, resolved: the OUT given
  # --append onto an earlier version: its directory (cli/append sets it; no option does)
  append_base: Optional[str] = setting(RUNTIME, None)
  append: bool = setting(RUNTIME, False)   # a versioned output: DEST/versions/<V>, DEST/LATEST
  compact: bool = setting(RUNTIME, False)  # --append: a full version with a fresh plan
  keep: int = setting(RUNTIME, 0)          # --append: versions kept (0: all)
  retain_hours: float = setting(RUNTIME, 24.0)  # --keep spares versions LATEST this recently

  def settings(self, *kinds: str) -> Dict[str, Any]:
    """{field: value as given} of the fields of these kinds (all when none is named)."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if not kinds or f.metadata["kind"] in kinds}

  def record_settings(self) -> Dict[str, Any]:
    """What --append compares with the earlier version: any change re-encodes all."""
    return self.settings(RECORDS)

  @classmethod
  def record_defaults(cls) -> Dict[str, Any]:
    """The RECORDS settings' defaults: what a version made before a setting existed had."""
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.metadata["kind"] == RECORDS and f.default is not dataclasses.MISSING}

  def fingerprint_settings(self) -> Dict[str, Any]:
    """What --if-changed's fingerprint covers besides the sources' files."""
    return self.settings(RECORDS, INPUTS)

  def schema_option(self) -> str:
    return self.schema or schemas.DEFAULT

  @functools.cached_property
  def renamed(self) -> Dict[str, str]:
    """--feature-names checked against the schema's keys, its keypoint keys among them (a
    source's keypoints are known only once it is read; UsageError when wrong)."""
    schema = schemas.get(self.schema_option()).with_masks(self.include_masks)
    spec = {**schema.feature_spec, **getattr(schema.module, "KEYPOINT_SPEC", {})}
    return schemas.parse_feature_names(self.feature_names, spec)

  @functools.cached_property
  def columns(self) -> Dict[str, str]:
    """--csv-columns as {field: CSV column} (ValueError when malformed)."""
    from beam_tfrecord.sources.csv import parse_column_map  # Beam: convert only
    return parse_column_map(self.csv_columns)

  @functools.cached_property
  def selection(self):
    """--classes and --class-map as a ClassSelection (None when neither is given)."""
    from beam_tfrecord.prepare import class_selection
    return class_selection.parse(self.classes, self.class_map)

  @functools.cached_property
  def fractions(self) -> Optional[Dict[str, float]]:
    """--split as {split: fraction} (None without it)."""
    return splitting.parse_split_fractions(self.split) if self.split else None

  @functools.cached_property
  def resize_size(self) -> Optional[Tuple[int, int]]:
    """--resize as (width, height) (None without it)."""
    return imaging.parse_size(self.resize) if self.resize else None

  @functools.cached_property
  def encode(self) -> EncodeOptions:
    """What the shard writer needs to turn an image and its annotation into records."""
    schema = schemas.get(self.schema_option())
    # a schema whose readers decode one format (coco-objects: JPEG) turns 'keep' into it
    image_format = (schema.image_format if schema.image_format and self.image_format == "keep"
                    else self.image_format)
    return EncodeOptions(bbox_policy=self.bbox_policy, max_pixels=self.max_pixels,
                         exif_frame=self.exif_frame, verify_images=self.verify_images,
                         max_image_bytes=self.max_image_bytes, include_masks=self.include_masks,
                         preprocess=imaging.Preprocess(
                             max_side=self.max_side,
                             resize=self.resize_size,
                             image_format=image_format, jpeg_quality=self.jpeg_quality),
                         schema=schema.option, renames=tuple(sorted(self.renamed.items())),
                         follow_symlinks=self.follow_symlinks)

  def validate(self) -> None:
    if self.format not in FORMATS:
      raise ValueError(f"--format must be one of {', '.join(FORMATS)}")
    if not self.inputs:
      raise ValueError("give at least one --input")
    if any(c in self.output for c in "[]*?"):
      # Beam's own file sinks (WriteToText for the error report) glob their temporary paths
      raise ValueError(f"--output {self.output!r} contains one of [ ] * ?, which Beam's file "
                       "sinks read as a pattern; choose a directory name without them")
    for what, items in (("--input", self.inputs), ("--images", self.images),
                        ("--output", [self.output]), ("--label-map", [self.label_map or ""]),
                        ("--classes-file", [self.classes_file or ""]),
                        ("--class-descriptions", [self.class_descriptions or ""])):
      for item in items:  # an object store without its client library: what to install
        check_store(paths.parse_assignment(item)[1], what)
    if self.sink not in SINKS:
      raise ValueError(f"--sink must be one of {', '.join(SINKS)}")
    if self.num_shards is not None and self.num_shards < 1:
      raise ValueError("--num-shards must be at least 1")
    if self.num_shards and self.shard_size_mb:
      raise ValueError("give --num-shards or --shard-size-mb, not both")
    if self.shard_size_mb is not None and not (math.isfinite(self.shard_size_mb)
                                               and self.shard_size_mb > 0):
      raise ValueError(f"--shard-size-mb must be a positive number, not {self.shard_size_mb}")
    if self.records_per_shard is not None and (
        self.records_per_shard < 1 or self.num_shards or self.shard_size_mb):
      raise ValueError("--records-per-shard must be at least 1, without --num-shards or "
                       "--shard-size-mb")
    if self.sink == "beam" and (self.records_per_shard or self.shard_name_template !=
                                naming.DEFAULT_SHARD_NAME_TEMPLATE):
      raise ValueError("--records-per-shard and --shard-name-template need --sink shards "
                       "(Beam's WriteToTFRecord names and fills its shards itself)")
    if self.shard_name_template != naming.DEFAULT_SHARD_NAME_TEMPLATE:
      naming.template_fields(self.shard_name_template)
    if self.file_format not in record_files.FILE_FORMATS:
      raise ValueError(f"--file-format must be one of {', '.join(record_files.FILE_FORMATS)}")
    if self.file_format != record_files.TFRECORD and self.sink != "shards":
      raise ValueError(f"--file-format {self.file_format} needs --sink shards (Beam's sink "
                       "writes TFRecords)")
    if self.index_files and (self.file_format != record_files.TFRECORD or self.sink != "shards"):
      raise ValueError("--index-files indexes TFRecord shards this tool writes (--sink "
                       "shards); ArrayRecord files carry their own index")
    self.fractions  # noqa: B018 (ValueError when malformed; cached for every later use)
    for item in list(self.inputs) + list(self.images):
      split, _ = paths.parse_assignment(item)
      if split:
        splitting.check_split_name(split)
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
    self.columns  # noqa: B018
    if self.max_side is not None and self.resize:
      raise ValueError("give --max-side or --resize, not both")
    if self.max_side is not None and self.max_side < 1:
      raise ValueError("--max-side must be at least 1")
    self.resize_size  # noqa: B018
    if self.image_format not in imaging.IMAGE_FORMATS:
      raise ValueError(f"--image-format must be one of {', '.join(imaging.IMAGE_FORMATS)}")
    if not 1 <= self.jpeg_quality <= 100:
      raise ValueError("--jpeg-quality must be within 1..100")
    if self.writer_processes < 0:
      raise ValueError("--writer-processes must be 0 (automatic) or more")
    self.selection  # noqa: B018 (ValueError when --classes or --class-map is malformed)
    if (self.compact or self.keep) and not self.append:
      raise ValueError("--compact and --keep go with --append")
    if self.keep < 0:
      raise ValueError("--keep must be 0 (keep every version) or more")
    if not 0 <= self.retain_hours < float("inf"):  # NaN fails too
      raise ValueError("--retain-hours must be 0 or more hours")
    if self.append and (self.sink != "shards" or self.overwrite):
      raise ValueError("--append needs --sink shards and makes versions: no --overwrite")
    if self.append and self.source_fingerprint is not None and \
        self.source_fingerprint.get("compute"):
      raise ValueError("--append compares the sources itself: leave out --if-changed")
    if self.layout not in LAYOUTS:
      raise ValueError(f"--layout must be one of {', '.join(LAYOUTS)}")
    if self.layout == "tfds":
      if not tfds_layout.VERSION_RE.fullmatch(self.dataset_version):
        raise ValueError(f"--dataset-version {self.dataset_version!r}: give MAJOR.MINOR.PATCH, "
                         "numbers without leading zeros, e.g. 1.0.0 (TFDS loads no other)")
      tfds_layout.check_options(self)
    elif self.dataset_name or self.dataset_version != "1.0.0":
      raise ValueError("--dataset-name and --dataset-version go with --layout tfds")

  def first_id(self) -> int:
    """The id of the first class when ids are numbered from sorted names: the schema's, for
    an image-level source its FIRST_ID_IMAGE_LEVEL (tutorial: 0, as classification)."""
    schema = schemas.get(self.schema_option())
    return schema.first_id_for(schema.image_level and registry.image_level(self))

  def check_resolved(self) -> None:
    """The checks that need the format and the schema decided (see resolve): UsageError."""
    schema = schemas.get(self.schema_option())
    if not schema.image_level and registry.image_level(self):
      # a box schema writes objects only: every image-level label would be dropped
      fitting = [name for name in schemas.REGISTRY if schemas.get(name).image_level]
      raise UsageError(f"--schema {schema.option} writes boxes only, and this --format "
                       f"{self.format} input labels whole images: every label would be lost; "
                       f"use --schema {' or '.join(fitting)}")
    if self.csv_normalized and self.format != "csv":
      raise UsageError(f"--csv-normalized applies to --format csv only, not {self.format}")
    for option, value, fmt in (("--classes-file", self.classes_file, "yolo-keras"),
                               ("--class-descriptions", self.class_descriptions, "openimages")):
      if value and self.format != fmt:
        raise UsageError(f"{option} applies to --format {fmt} only, not {self.format}")
    if self.include_masks and not schema.masks:
      raise UsageError(f"--include-masks writes image/object/mask of the {schemas.DEFAULT} "
                       f"schema, not {schema.option}")
    source = registry.get(self.format)
    if schema.class_masks and not (source.MASKS or getattr(source, "CLASS_MASKS", False)):
      fitting = [n for n in registry.FORMATS if registry.get(n).MASKS
                 or getattr(registry.get(n), "CLASS_MASKS", False)]
      raise UsageError(f"--schema {schema.option} paints segmentations or class PNGs: format "
                       f"{self.format} has neither (use one of {', '.join(fitting)})")
    if self.include_masks and not source.MASKS:
      with_masks = [name for name in registry.FORMATS if registry.get(name).MASKS]
      raise UsageError(f"--include-masks needs segmentations: format {self.format} has none "
                       f"(use one of {', '.join(with_masks)})")
    if schema.image_format and self.image_format not in ("keep", schema.image_format):
      raise UsageError(f"--schema {schema.option} writes {schema.image_format.upper()} (what "
                       f"its readers decode); --image-format {self.image_format} does not fit "
                       "it")
    self.renamed  # noqa: B018
    if self.images and not getattr(registry.get(self.format), "IMAGES", True):
      raise UsageError(f"--format {self.format} finds its images itself (from its inputs); "
                       "--images would be ignored: leave it out")
    self.input_image_roots()  # ValueError when --images and --input do not pair up
    if self.shard_name_template != naming.DEFAULT_SHARD_NAME_TEMPLATE:
      splits = possible_splits(self)
      naming.check_template(self.shard_name_template, splits, self.num_shards)
      naming.check_names(self.shard_name_template, splits, self.num_shards)
      check_name_length(self, splits)

  def input_image_roots(self) -> List[Tuple[Optional[str], str, Optional[str]]]:
    """(split, uri, image root or None) of each --input: its split's --images SPLIT=DIR, else
    the unprefixed --images. Several unprefixed --images go with the --inputs in order (the
    i-th with the i-th). One root never silently replaces another: a count that does not
    match, a split given twice, a SPLIT= no --input has, or both kinds mixed with several
    unprefixed ones raise ValueError."""
    inputs = [paths.parse_assignment(item) for item in self.inputs]
    unprefixed, per_split = [], {}
    for item in self.images:
      split, root = paths.parse_assignment(item)
      if not split:
        unprefixed.append(root)
      elif per_split.setdefault(split, root) != root:
        raise ValueError(f"--images {split}= is given twice ({per_split[split]}, {root}); for "
                         "several inputs of one split give one --images without SPLIT= per "
                         "--input, in --input order")
    unused = sorted(set(per_split) - {split for split, _ in inputs if split})
    if unused:
      raise ValueError(f"--images {unused[0]}={per_split[unused[0]]}: no --input has the split "
                       f"{unused[0]} (--images SPLIT=DIR goes with --input SPLIT=FILE)")
    if len(unprefixed) > 1:
      if len(unprefixed) != len(inputs):
        raise ValueError(f"{len(unprefixed)} --images without SPLIT= for {len(inputs)} --input: "
                         "give one for all inputs, one per --input (paired in order), or "
                         "SPLIT=DIR")
      if per_split:
        raise ValueError("give one --images without SPLIT= per --input (paired in order) or "
                         "--images SPLIT=DIR, not both")
      return [(split, uri, root) for (split, uri), root in zip(inputs, unprefixed)]
    default = unprefixed[0] if unprefixed else None
    return [(split, uri, per_split.get(split or "", default)) for split, uri in inputs]

  def file_inputs(self) -> List[Tuple[Optional[str], str, str]]:
    """(split, annotation uri, image root) of each --input of a file format (COCO, CSV): the
    root is its --images (input_image_roots), else the file's directory."""
    result = []
    for split, uri, root in self.input_image_roots():
      if root is None:
        root = posixpath.dirname(uri) if paths.is_remote(uri) else os.path.dirname(uri) or "."
      result.append((split, uri, root))
    return result

  def input_paths(self) -> List[str]:
    """Every path the run reads: annotation inputs, image roots, the label map, class lists."""
    return input_paths(self)


def possible_splits(config: ConvertConfig) -> Optional[set]:
  """The splits a run can produce, when known before reading the data (None: a CSV's split
  column can name any; YOLO and class folders are not looked at here)."""
  if config.split:
    return set(config.fractions)
  return registry.possible_splits(config)


def check_name_length(config: ConvertConfig, splits: Optional[set]) -> None:
  """UsageError when --shard-name-template can give a name longer than a file system takes.
  Names are formatted with each split name the run can have (none when the splits are known
  only from the data), the first and last index and the shard and record counts the options
  allow (--num-shards, --records-per-shard; 1 where they set no bound): a name too long with
  these is too long in the run. Padding in the template counts as given."""
  template = config.shard_name_template
  num_shards, count = config.num_shards or 1, config.records_per_shard or 1
  linked = config.append
  limit = NAME_MAX - (LINK_SUFFIX_BYTES if linked else 0)
  size, split, index = max(
      (_name_bytes(naming.format_shard_name(template, split, index, num_shards, count)),
       split, index)
      for split in sorted(splits or {""}) for index in {0, num_shards - 1})
  if size > limit:
    shown = template if len(template) <= 60 else template[:57] + "..."
    what = (f"--dataset-name {config.dataset_name!r} (in TFDS's shard names)"
            if config.layout == "tfds" else f"--shard-name-template {shown!r}")
    raise UsageError(f"{what} gives names of {size} bytes ("
                     + (f"split {split!r}, " if split else "")
                     + f"index {index}, num_shards {num_shards}, count {count}); a file name "
                     f"may have at most {limit} bytes"
                     + (" here (an earlier output's shards are linked under longer "
                        "temporary names)" if linked else ""))


def _name_bytes(name: str) -> int:
  try:
    return len(os.fsencode(name))  # what the file system is given
  except UnicodeEncodeError:
    return len(name.encode("utf-8", "surrogatepass"))


def checked(config: ConvertConfig,
            announce: Optional[Callable[[str], None]] = None) -> ConvertConfig:
  """The one place a config is validated and resolved (the CLI calls it, and pipeline.build
  for a config no one checked): UsageError, one line, for what is wrong. The result is marked
  checked, so build() does not check it again; a changed config (dataclasses.replace) is a new,
  unchecked one. `announce` gets --format auto's decision (the CLI prints it)."""
  if getattr(config, "_checked", False):
    return config
  try:
    config.validate()
  except ValueError as e:
    raise UsageError(str(e)) from None
  check_file_kinds(config)  # before --format auto or any other check opens one
  config = resolve(config, announce)
  object.__setattr__(config, "_checked", True)  # not a field: replace() drops it
  return config


def check_file_kinds(config: ConvertConfig) -> None:
  """UsageError, one line, for a FIFO, socket or device named by an option (a directory
  where a file is wanted): refused by its stat, since opening a FIFO waits for a writer."""
  named = [("--input", paths.parse_assignment(i)[1], None) for i in config.inputs]
  named += [("--images", paths.parse_assignment(i)[1], True) for i in config.images]
  named += [("--output", config.output, True),
            ("--label-map", config.label_map, False),
            ("--classes-file", config.classes_file, False),
            ("--class-descriptions", config.class_descriptions, False)]
  for option, path, folder in named:
    problem = files.not_a_file(option, path or "", folder)
    if problem:
      raise UsageError(problem)


def resolve(config: ConvertConfig,
            announce: Optional[Callable[[str], None]] = None) -> ConvertConfig:
  """A config with --format auto decided (detect.py) and the schema chosen: classification
  for image-level sources (class folders, classification CSV listings), else od-api.
  Raises UsageError when the format cannot be decided (registry.check does the rest)."""
  if config.format == "auto":
    from beam_tfrecord.sources import detect
    found = detect.detect(config.inputs)
    if announce:
      announce(found.line())
    config = dataclasses.replace(config, format=found.format, inputs=list(found.inputs))
  if (config.file_format != record_files.TFRECORD
      and config.shard_name_template == naming.DEFAULT_SHARD_NAME_TEMPLATE):
    config = dataclasses.replace(config, shard_name_template=naming.default_template(
        config.file_format))
  if config.layout == "tfds":  # TFDS's own features and directory (finalize/tfds_layout.py)
    config = tfds_layout.resolve(config, registry.image_level(config))
  if config.schema is None:
    config = dataclasses.replace(config, schema="classification"
                                 if registry.image_level(config) else schemas.DEFAULT)
  if (schemas.get(config.schema).class_masks and not config.include_masks
      and registry.get(config.format).MASKS):  # deeplab paints the sources' segmentations
    config = dataclasses.replace(config, include_masks=True)
  try:
    config.check_resolved()
  except ValueError as e:
    raise UsageError(str(e)) from None
  return config


def input_paths(config: "ConvertConfig") -> List[str]:
  """Every path the run reads: annotation inputs, image roots, the label map, class lists."""
  found = [paths.parse_assignment(i)[1] for i in list(config.inputs) + list(config.images)]
  return found + [p for p in (config.label_map, config.classes_file, config.class_descriptions)
                  if p]

"""build(pipeline, config): the conversion's wiring, stage by stage in reading order:
source -> prepare (locate, split, label map) -> plan shards -> write -> finalize."""
from __future__ import annotations

import os
import uuid
from typing import List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord import schemas
from beam_tfrecord.runners import in_process, local_cores, local_runner
from beam_tfrecord import config as configs
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import UsageError
from beam_tfrecord.finalize import fingerprint as fingerprints
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.finalize import tfds_layout
from beam_tfrecord.finalize.transform import Finalize, count_keys
from beam_tfrecord.plan import previous as previous_output
from beam_tfrecord.plan.previous import Previous
from beam_tfrecord.plan.shard_plan import overlap_warning
from beam_tfrecord.plan.transform import (CheckEarlierFiles, PlanShards, SortRuns,
                                          shard_tasks)
from beam_tfrecord.prepare.labels import BuildLabelMap
from beam_tfrecord.prepare.locate import DedupeImages, PrepareImages
from beam_tfrecord.prepare.select import SelectClasses
from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.records import coders, packed
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.sources import registry
from beam_tfrecord.storage import files, paths, record_files
from beam_tfrecord.storage.processes import stop_idle
from beam_tfrecord.write import leakage
from beam_tfrecord.write.errors_file import WriteErrorsFile
from beam_tfrecord.write.leakage import FindCopies
from beam_tfrecord.write.shard_writer import merge_stats
from beam_tfrecord.write.transform import (Indexing, WriteShards,
                                           WriteWithBeamSink)

# Records that cross shuffles are encoded as tuples of their fields, not pickled (coders.py).
coders.register(ImageAnnotation)


def writer_processes(root, config: ConvertConfig) -> Tuple[int, int]:
  """(processes that write shards, fewest images per process): --writer-processes N is used
  as given; by default one per core on the in-process local runner in its in_memory mode (it
  writes the shards on one thread) when the run is big enough to pay for starting them, else 1:
  distributed runners and Beam's multi-worker modes spread shards over their own workers."""
  if config.writer_processes:
    return config.writer_processes, 0
  from beam_tfrecord.write.shard_writer import MIN_IMAGES_PER_PROCESS
  if in_process(root):
    return local_cores(), MIN_IMAGES_PER_PROCESS
  return 1, 0


def declared_splits(fractions: Optional[Mapping[str, float]],
                    source_splits: Optional[Sequence[str]]) -> List[str]:
  """The splits a run must not end without: --split's (but those given 0), else the ones
  the source names up front (a split the source lists and whose images were all lost)."""
  if fractions:
    return sorted(name for name, fraction in fractions.items() if fraction > 0)
  return sorted(source_splits or ())


def work_directories(staging: str, run_id: str, spill: bool) -> Tuple[str, Optional[str]]:
  """(where the plan's sorted runs go, where partitions are spilled or None): with `spill` (a
  local runner: every worker shares this machine's disk) both on local disk, inside the run
  directory when that is local, else in a temporary folder; otherwise the runs go to the run
  directory (gs:// on Dataflow) and partitions through the runner's shuffle."""
  if not spill:
    return paths.join(staging, outputs.WORK), None
  base = (os.path.join(staging, outputs.WORK) if not paths.is_remote(staging) else
          outputs.local_work_dir(run_id))
  return os.path.join(base, "runs"), os.path.join(base, "spill")  # made when written


def earlier_output(config: ConvertConfig) -> Tuple[Optional[Previous], Optional[dict]]:
  """(the earlier version, {"previous", "reason"}) of an --append onto it (append_base), read
  on the launcher (its manifest: O(splits x shards + classes)); reason says why every image
  is encoded again ('' when they are compared). (None, None) for any other run."""
  if not config.append_base:
    return None, None
  previous = previous_output.load(config.append_base, "--append")
  changed = previous_output.changed_settings(config.record_settings(), previous,
                                             config.record_defaults())
  reason = f"settings that shape records changed: {', '.join(changed)}" if changed else ""
  return previous, {"previous": previous, "reason": reason}


def build(root, config: ConvertConfig, argv: Sequence[str] = (),
          run_id: Optional[str] = None, local: Optional[bool] = None) -> beam.PCollection:
  """Wire the whole conversion onto `root` (a Pipeline). Returns the manifest PCollection.
  Raises UsageError for problems found before running (see config.checked). `local`: join annotation
  files and partition the shard order through spill files on this machine's disk rather than
  the runner's shuffles (default: on local runners, local_runner)."""
  if local is None:
    local = local_runner(root)
  config = configs.checked(config)  # as is when the CLI checked it
  paths.forget_roots()  # this run sees the image roots and listings as they are now
  files.forget_listings()
  stop_idle()  # and worker processes of its own, without an earlier run's caches
  run_id = run_id or uuid.uuid4().hex
  staging = outputs.run_dir(config.output, run_id)
  options = config.encode
  schema = schemas.from_options(options)
  first_id = config.first_id()  # the schema's, or its image-level sources' (tutorial: 0)
  user_map = (files.read_label_map(config.label_map, min_id=first_id)
              if config.label_map else None)
  if user_map is not None and config.layout == "tfds":
    try:
      tfds_layout.check_label_ids(user_map)
    except ValueError as e:
      raise UsageError(str(e)) from None
  source, source_splits = registry.read(root, config, first_id=first_id, local=local)
  selection = config.selection
  if selection is not None:  # --classes / --class-map: before anything gets an id
    source, excluded_counts = root | "SelectClasses" >> SelectClasses(
        source, selection, ",".join(config.inputs))
  else:
    excluded_counts = root | "NothingExcluded" >> beam.Create([])
  fractions = config.fractions
  remote = config.allow_absolute_paths or any(
      paths.is_remote(paths.parse_assignment(item)[1]) for item in config.images + config.inputs)
  batches, prepare_errors = source.images | "Prepare" >> PrepareImages(fractions, remote=remote)
  label_map = beam.pvalue.AsSingleton(
      root | "LabelMap" >> BuildLabelMap(source, user_map, first_id,
                                         # a selection or a ClassLabel: ids without gaps
                                         contiguous=selection is not None
                                         or config.layout == "tfds"))

  # --- --if-changed: the sources' fingerprint, listed on workers (the launcher lists no
  # folder) and compared there with the output's last successful run. `unchanged` is one
  # bool, True when the run will be skipped (always False without --if-changed): a stage may
  # gate its work on beam.pvalue.AsSingleton(unchanged); Finalize then replaces nothing.
  if fingerprints.requested(config):
    if_changed = (root
                  | "IfChanged" >> fingerprints.SourceFingerprint(config)
                  | "CompareFingerprint" >> beam.Map(fingerprints.compare, config.output))
    unchanged = if_changed | "Unchanged" >> beam.Map(lambda compared: compared["unchanged"])
    finalize_if_changed = [beam.pvalue.AsSingleton(if_changed)]
  else:
    unchanged = root | "Unchanged" >> beam.Create([False])
    finalize_if_changed = []
  # --- end of --if-changed

  # --- --append: the earlier version's plan, and its shards and catalog to compare with
  previous, incremental = earlier_output(config)
  indexing = Indexing(index=config.append, previous=previous)
  previous_plan = previous.splits if previous is not None else None

  template = config.shard_name_template
  if config.sink == "shards":
    count_records = schema.records_counter()
    packed_images = batches | "Pack" >> beam.Map(
        lambda batch: [packed.pack_plain(image, count_records(image)) for image in batch]
    ).with_output_types(List[packed.Packed])
    runs_dir, spill_dir = work_directories(staging, run_id, local)
    if previous is not None:  # its files checked once, before the sort compares with them
      checks, check_errors = root | "CheckEarlier" >> CheckEarlierFiles(
          previous, processes=local_cores() if in_process(root) else 1)
      checks = beam.pvalue.AsList(checks)
    else:
      checks, check_errors = None, root | "NoEarlier" >> beam.Create([])
    # the in-process runner's one thread would sort every run itself: its cores do
    sort_runs = SortRuns(runs_dir, spill_dir, previous,
                         processes=local_cores() if in_process(root) else 1,
                         label_map=label_map, checks=checks,
                         reuse=bool(incremental) and not incremental["reason"])
    counts, sort_errors = packed_images | "SortRuns" >> sort_runs
    planned = counts | "Plan" >> PlanShards(
        config.num_shards, config.shard_size_mb, staging, config.records_per_shard, template,
        sort_runs.span, previous_plan, append=config.append and previous_plan is not None)
    plan = beam.pvalue.AsSingleton(planned)
    processes, min_images = writer_processes(root, config)
    tasks = root | "Shards" >> beam.Create([None]) | "ShardTasks" >> beam.FlatMap(
        shard_tasks, plan, beam.pvalue.AsSingleton(unchanged))  # --if-changed: none
    writer = WriteShards(staging, runs_dir, label_map, plan, options, template, processes,
                         min_images, remote_images=remote, spread=not in_process(root),
                         indexing=indexing, contents_directory=(
                             leakage.contents_directory(spill_dir) if spill_dir else None),
                         checks=checks, container=record_files.Container(
                             config.file_format, config.index_files))
    stats, write_errors = tasks | "WriteShards" >> writer
    write_errors = ((check_errors, sort_errors, write_errors)
                    | "PlanAndWriteErrors" >> beam.Flatten())
    beam_files = root | "NoBeamFiles" >> beam.Create([])
  else:
    spill_dir = work_directories(staging, run_id, local)[1]
    images, dedupe_errors = batches | "Dedupe" >> DedupeImages()
    prepare_errors = (prepare_errors, dedupe_errors) | "PrepareErrors" >> beam.Flatten()
    splits = list(fractions) if fractions else (source_splits or [DEFAULT_SPLIT])
    known = set(splits)
    checked = images | "CheckSplit" >> beam.FlatMap(
        lambda a: [a] if a.split in known else [beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=a.source, stage="parse", reason="unknown_split", key=a.key,
            message=f"split {a.split!r} is not one of {sorted(known)} known when the "
            "pipeline was built (the beam sink needs them up front)"))]
    ).with_outputs("errors", main="images")
    writer = WriteWithBeamSink(staging, label_map, splits, config.num_shards, options)
    # the plan only counts each split's images here (Beam's sink shards them itself)
    planned = checked.images | "Count" >> beam.Map(
        lambda a: ((a.split, 0), (1, 1, a.size_bytes or 0))) | "Plan" >> PlanShards(
            None, None, staging)
    stats, encode_errors = checked.images | "WriteBeam" >> writer
    overlaps = (checked.images
                | "ByFile" >> beam.Map(lambda a: (a.uri, (a.split, a.source, a.key)))
                | "GroupByFile" >> beam.GroupByKey()
                | "InTwoSplits" >> beam.FlatMapTuple(
                    lambda uri, where: [overlap_warning(uri, where)]
                    if len({w[0] for w in where}) > 1 else []))
    write_errors = (checked.errors, encode_errors, overlaps) | "BeamErrors" >> beam.Flatten()
    beam_files = writer.written

  # identical image bytes across splits and within one (write/leakage.py): warnings, counts
  copies, leakage_counts = writer.contents | "FindCopies" >> FindCopies(
      spill_dir, spilled=bool(spill_dir) and config.sink == "shards")
  merged_stats = (stats
                  | "StatsKey" >> beam.Map(lambda s: ((s["split"], s["shard"]), s))
                  | "MergeStats" >> beam.CombinePerKey(merge_stats)
                  | "StatsValues" >> beam.Values())
  errors = ((source.errors, prepare_errors, write_errors, copies)
            | "AllErrors" >> beam.Flatten())
  error_files = errors | "WriteErrors" >> WriteErrorsFile(staging)  # the runner's order aside
  error_counts = ((errors | "Reasons" >> beam.FlatMap(
                      lambda e: [(key, 1) for key in count_keys(e)]), excluded_counts,
                   leakage_counts)
                  | "AllCounts" >> beam.Flatten()
                  | "CountReasons" >> beam.CombinePerKey(sum))
  return (root
          | "Once" >> beam.Create([None])
          | "Finalize" >> beam.ParDo(
              Finalize(config, argv, staging, run_id, declared_splits(fractions, source_splits),
                       incremental),
              beam.pvalue.AsList(merged_stats),
              beam.pvalue.AsDict(error_counts), label_map,
              beam.pvalue.AsList(error_files), beam.pvalue.AsList(beam_files),
              beam.pvalue.AsSingleton(planned), *finalize_if_changed,
              keypoints=beam.pvalue.AsList(
                  source.keypoints if source.keypoints is not None
                  else root | "NoKeypoints" >> beam.Create([]))))

"""build(pipeline, config): the conversion's wiring, stage by stage in reading order:
source -> prepare (locate, split, label map) -> plan shards -> write -> finalize."""
from __future__ import annotations

import uuid
from typing import List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord import schemas
from beam_tfrecord.config import ConvertConfig, resolve
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.finalize.transform import Finalize, count_keys
from beam_tfrecord.plan import shard_plan
from beam_tfrecord.plan.transform import PlanShards
from beam_tfrecord.prepare import label_map as label_maps
from beam_tfrecord.prepare.labels import BuildLabelMap
from beam_tfrecord.prepare.locate import PrepareImages
from beam_tfrecord.prepare.splitting import DEFAULT_SPLIT
from beam_tfrecord.records import coders, packed
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.sources import registry
from beam_tfrecord.storage import files, paths
from beam_tfrecord.write.shard_writer import merge_stats
from beam_tfrecord.write.transform import WriteShards, WriteWithBeamSink

# Records that cross shuffles are encoded as tuples of their fields, not pickled (coders.py).
coders.register(ImageAnnotation)


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
  from beam_tfrecord.write.shard_writer import (MIN_IMAGES_PER_PROCESS,
                                                local_processes)
  if in_process(root):
    return local_processes(), MIN_IMAGES_PER_PROCESS
  return 1, 0


def declared_splits(fractions: Optional[Mapping[str, float]],
                    source_splits: Optional[Sequence[str]]) -> List[str]:
  """The splits a run must not end without: --split's (but those given 0), else the ones
  the source names up front (a split the source lists and whose images were all lost)."""
  if fractions:
    return sorted(name for name, fraction in fractions.items() if fraction > 0)
  return sorted(source_splits or ())


def build(root, config: ConvertConfig, argv: Sequence[str] = (),
          run_id: Optional[str] = None) -> beam.PCollection:
  """Wire the whole conversion onto `root` (a Pipeline). Returns the manifest PCollection.
  Raises UsageError for problems found before running (see resolve)."""
  config.validate()
  config = resolve(config)
  paths.forget_roots()  # this run sees the image roots and listings as they are now
  files.forget_listings()
  run_id = run_id or uuid.uuid4().hex
  staging = outputs.run_dir(config.output, run_id)
  options = config.encode_options()
  schema = schemas.from_options(options)
  first_id = config.first_id()  # the schema's, or its image-level sources' (tutorial: 0)
  user_map = (label_maps.read(config.label_map, min_id=first_id)
              if config.label_map else None)
  source, source_splits = registry.read(root, config, first_id=first_id,
                                        in_process=in_process(root))
  fractions = config.split_fractions()
  remote = config.allow_absolute_paths or any(
      paths.is_remote(paths.parse_assignment(item)[1]) for item in config.images + config.inputs)
  images, prepare_errors = source.images | "Prepare" >> PrepareImages(
      fractions, dedupe=config.sink != "shards", remote=remote)
  label_map = beam.pvalue.AsSingleton(
      root | "LabelMap" >> BuildLabelMap(source, user_map, first_id))

  template = config.shard_name_template
  packed_images = images | "Pack" >> beam.Map(
      lambda ann: packed.pack(ann, schema.planned_records(ann)))
  planned = packed_images | "Plan" >> PlanShards(
      config.num_shards, config.shard_size_mb, staging, config.records_per_shard, template)
  plan = beam.pvalue.AsSingleton(planned)
  overlap_warnings = planned | "InTwoSplits" >> beam.FlatMap(shard_plan.overlap_warnings)

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
  errors = ((source.errors, prepare_errors, overlap_warnings, write_errors)
            | "AllErrors" >> beam.Flatten())
  error_files = (errors
                 | "ErrorJson" >> beam.Map(ErrorRecord.to_json)
                 | "WriteErrors" >> beam.io.WriteToText(
                     paths.join(staging, "errors"), file_name_suffix=".jsonl",
                     shard_name_template="-SSSSS-of-NNNNN", num_shards=1))
  error_counts = (errors
                  | "Reasons" >> beam.FlatMap(count_keys)
                  | "CountReasons" >> beam.combiners.Count.PerElement())
  return (root
          | "Once" >> beam.Create([None])
          | "Finalize" >> beam.ParDo(
              Finalize(config, argv, staging, run_id, declared_splits(fractions, source_splits)),
              beam.pvalue.AsList(merged_stats),
              beam.pvalue.AsDict(error_counts), label_map,
              beam.pvalue.AsList(error_files), beam.pvalue.AsList(beam_files), plan))

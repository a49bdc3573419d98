"""PlanShards: the run's ShardPlan (plan/shard_plan.py), computed once from every image."""
from __future__ import annotations

from typing import Optional

import apache_beam as beam

from beam_tfrecord.finalize import progress
from beam_tfrecord.plan import naming, shard_plan
from beam_tfrecord.records import packed


class _PlanFn(beam.CombineFn):
  """packed.Packed -> shard_plan.ShardPlan, combined ({(uri, split): winner}) rather than gathered:
  the runner lifts the combine before its shuffle, so one accumulator per bundle crosses it.
  Each image's planned records (the schema's) are what --records-per-shard counts."""

  def __init__(self, num_shards: Optional[int], shard_size_mb: Optional[float],
               records_per_shard: Optional[int] = None):
    self.num_shards, self.shard_size_mb = num_shards, shard_size_mb
    self.records_per_shard = records_per_shard

  def create_accumulator(self) -> shard_plan.PlanEntries:
    return {}

  def add_input(self, acc, image: packed.Packed):
    return shard_plan.add_plan_entry(acc, image[packed.URI], packed.plan_entry(image))

  def merge_accumulators(self, accs):
    accs = iter(accs)
    merged = next(accs)
    for acc in accs:
      for (uri, _), entry in acc.items():
        shard_plan.add_plan_entry(merged, uri, entry)
    return merged

  def extract_output(self, acc) -> shard_plan.ShardPlan:
    return shard_plan.make_plan(acc, self.num_shards, self.shard_size_mb, self.records_per_shard)


class PlanShards(beam.PTransform):
  """PCollection[packed.Packed] (split and size set) -> PCollection of one shard_plan.ShardPlan.

  One combine over all images (_PlanFn). The plan also records each split's planned image
  count in the run directory for the progress line (progress.py), and checks the names of all
  shards together (--shard-name-template) before any is written, since the writer waits for
  the plan: a clash raises, failing the run with nothing written.
  """

  def __init__(self, num_shards: Optional[int], shard_size_mb: Optional[float], staging: str,
               records_per_shard: Optional[int] = None,
               template: str = naming.DEFAULT_SHARD_NAME_TEMPLATE):
    super().__init__()
    self.combine = _PlanFn(num_shards, shard_size_mb, records_per_shard)
    self.staging, self.template = staging, template

  def expand(self, images):
    staging, template = self.staging, self.template

    def planned(plan: shard_plan.ShardPlan) -> shard_plan.ShardPlan:
      for split, split_plan in plan.splits.items():
        progress.record_planned(staging, split, split_plan.count)
      if template != naming.DEFAULT_SHARD_NAME_TEMPLATE:
        naming.shard_names(list(plan.splits.values()), template)
      return plan

    return (images
            | "Combine" >> beam.CombineGlobally(self.combine)
            | "Planned" >> beam.Map(planned))

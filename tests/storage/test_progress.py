"""storage/progress.py: progress in images while a conversion runs, in-process and across
processes."""
from __future__ import annotations

import os

import pytest
from conftest import make_dataset

from beam_tfrecord import config as config_mod
from beam_tfrecord.storage import progress
from beam_tfrecord.plan import transform as plan_stage
from beam_tfrecord.prepare import labels as label_stage
from beam_tfrecord.prepare import locate
from beam_tfrecord.sources import registry


@pytest.mark.e2e
@pytest.mark.parametrize("beam_args", [["--runner=FnApiRunner"],
                                       ["--runner=DirectRunner", "--direct_num_workers=2",
                                        "--direct_running_mode=multi_processing"]])
def test_progress_reaches_the_total(tmp_path, beam_args):
  """The plan and shard-writing steps of a real run, stopped before finalize deletes the
  staging directory: the progress files add up to every image, in-process and across
  processes."""
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions

  from beam_tfrecord import pipeline
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.records import packed
  from beam_tfrecord.write.transform import WriteShards
  ds = make_dataset(tmp_path / "data", count=9, seed=5, extras=False)
  config = config_mod.ConvertConfig(format="coco", inputs=ds.file_inputs("coco"),
                                  images=[str(ds.image_dir)], output=str(tmp_path / "out"),
                                  num_shards=2)
  staging = outputs.run_dir(config.output, "test")
  with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
    source, _ = registry.read(p, config, first_id=1, local=pipeline.local_runner(p))
    batches, _ = source.images | locate.PrepareImages(None)
    images = batches | beam.Map(lambda batch: [packed.pack_plain(a) for a in batch])
    label_map = beam.pvalue.AsSingleton(p | label_stage.BuildLabelMap(source, None))
    runs = os.path.join(staging, ".work", "runs")
    counts, _ = images | plan_stage.SortRuns(runs)
    plans = beam.pvalue.AsSingleton(counts | plan_stage.PlanShards(2, None, staging))
    tasks = p | beam.Create([None]) | beam.FlatMap(plan_stage.shard_tasks, plans)
    _ = tasks | WriteShards(staging, runs, label_map, plans, config.encode)
  done, total, planned_at = progress.snapshot(staging)
  assert (done, total) == (len(ds.images), len(ds.images))
  assert planned_at is not None
  line = progress.describe(done, total, 3.0, 2.0)
  assert f"{len(ds.images)} / {len(ds.images)} images (100%)" in line and "ETA" not in line
  watcher = progress.Progress(staging)
  assert "9 / 9 images" in watcher._text() and watcher.last == (9, 9)
  import shutil
  shutil.rmtree(staging)  # what a successful commit does: the line must not fall back to "planning"
  assert "9 images done, finishing" in watcher._text()


def test_progress_line_before_and_during_the_run():
  assert "planning" in progress.describe(0, None, 4.0, 0.0)
  line = progress.describe(250, 1000, 12.0, 10.0)
  assert line == "converting: 250 / 1,000 images (25%), 25 images/s, ETA 30 s, 12 s"
  assert "ETA 1 h 06 min" in progress.describe(10, 4000, 5.0, 10.0)


def test_shard_counter_writes_at_most_every_interval(tmp_path):
  counter = progress.ShardCounter(str(tmp_path), "train-00000-of-00001.tfrecord", every=3600)
  for _ in range(5):
    counter.tick()
  assert progress.snapshot(str(tmp_path)) == (0, None, None)  # nothing written yet
  counter.close()
  progress.record_planned(str(tmp_path), "train", 7)
  assert progress.snapshot(str(tmp_path))[:2] == (5, 7)
  assert sorted(p.name for p in tmp_path.iterdir()) == [".done-train-00000-of-00001.tfrecord",
                                                        ".planned-train"]

"""Options are defined once: `convert`'s argparse options are the ConvertConfig fields (and
the run options), and docs/options.md is generated from them. (The Dataflow template's
parameters are checked against the same options in tests/deploy/test_dataflow.py.)"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from beam_tfrecord import cli
from beam_tfrecord.cli import convert_config
from beam_tfrecord.config import ConvertConfig

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/cli/ is two below
# set by --if-changed and by --layout tfds's resolution, not by an option
NOT_OPTIONS = {"source_fingerprint", "tfds_root"}


def test_every_option_is_a_config_field_and_back():
  dests = {a.dest for a in cli.convert_options()}
  fields = {f.name for f in dataclasses.fields(ConvertConfig)}
  assert dests - set(cli.RUN_OPTIONS) == fields - NOT_OPTIONS
  assert not set(cli.RUN_OPTIONS) & fields


def test_parsed_options_reach_the_config_unchanged():
  """Every option given on the command line arrives in ConvertConfig with its value."""
  argv = ["convert", "--input", "a.json", "--input", "val=b.json", "--output", "out",
          "--images", "imgs", "--format", "coco", "--label-map", "l.pbtxt", "--schema", "od-api",
          "--split", "train=0.5,val=0.5", "--num-shards", "3", "--sink", "shards",
          "--csv-columns", "class=label", "--bbox-policy", "drop", "--allow-absolute-paths",
          "--follow-symlinks", "--max-error-rate", "0.25", "--max-pixels", "99",
          "--exif-frame", "stored", "--verify-images", "--feature-names", "image/encoded=img",
          "--include-masks", "--max-side", "64", "--image-format", "png", "--jpeg-quality",
          "80", "--max-image-bytes", "1234", "--writer-processes", "2", "--overwrite",
          "--shard-name-template", "{split}-{index}.tfrecord", "--classes", "a,b",
          "--class-map", "a=c", "--classes-file", "names.txt", "--class-descriptions",
          "d.csv", "--layout", "tfds", "--dataset-name", "ds", "--dataset-version", "2.0.1",
          "--plan-from", "earlier", "--incremental"]
  args, _ = cli.make_parser().parse_known_args(argv)
  config = convert_config._config(args)
  assert config.inputs == ["a.json", "val=b.json"] and config.images == ["imgs"]
  assert (config.num_shards, config.max_error_rate, config.max_pixels) == (3, 0.25, 99)
  assert (config.bbox_policy, config.exif_frame, config.image_format) == ("drop", "stored", "png")
  assert config.allow_absolute_paths and config.follow_symlinks and config.verify_images
  assert config.include_masks and config.overwrite and config.max_side == 64
  assert (config.jpeg_quality, config.max_image_bytes, config.writer_processes) == (80, 1234, 2)
  assert config.shard_name_template == "{split}-{index}.tfrecord"
  assert (config.classes, config.class_map, config.classes_file, config.class_descriptions) == (
      "a,b", "a=c", "names.txt", "d.csv")
  assert (config.layout, config.dataset_name, config.dataset_version) == ("tfds", "ds", "2.0.1")
  assert config.plan_from == "earlier" and config.incremental
  strict, _ = cli.make_parser().parse_known_args(
      ["convert", "--input", "a", "--output", "o", "--strict"])
  assert convert_config._config(strict).max_error_rate == 0.0


def test_config_is_frozen():
  config = ConvertConfig(format="coco", inputs=["a.json"], output="out")
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.overwrite = True  # type: ignore[misc]


def test_options_doc_is_current():
  result = subprocess.run([sys.executable, str(ROOT / "scripts" / "options_doc.py")],
                          capture_output=True, text=True, cwd=str(ROOT), check=True)
  assert (ROOT / "docs" / "options.md").read_text() == result.stdout, \
      "docs/options.md is stale: python scripts/options_doc.py > docs/options.md"


def test_output_with_glob_characters_is_refused_up_front():
  from beam_tfrecord.config import ConvertConfig
  with pytest.raises(ValueError, match="pattern"):
    ConvertConfig(format="coco", inputs=["a.json"], output="/tmp/out[1]").validate()

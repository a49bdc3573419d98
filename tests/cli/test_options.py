"""Options are defined once: `convert`'s argparse options are the ConvertConfig fields (and
the run options), and docs/options.md is generated from them. (The Dataflow template's
parameters are checked against the same options in tests/deploy/test_dataflow.py.)"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beam_tfrecord import cli
from beam_tfrecord.cli import convert_config
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/cli/ is two below
# set by --if-changed and by --layout tfds's resolution, not by an option
NOT_OPTIONS = {"source_fingerprint", "tfds_root", "append_base"}


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
          "d.csv", "--layout", "tfds", "--dataset-name", "ds", "--dataset-version", "2.0.1"]
  args, _ = cli.make_parser().parse_known_args(argv)
  config = convert_config._config(args)
  # local paths arrive absolute: typed relative or absolute, they name the same files
  here = os.getcwd()
  assert config.inputs == [os.path.join(here, "a.json"), "val=" + os.path.join(here, "b.json")]
  assert config.images == [os.path.join(here, "imgs")]
  assert (config.num_shards, config.max_error_rate, config.max_pixels) == (3, 0.25, 99)
  assert (config.bbox_policy, config.exif_frame, config.image_format) == ("drop", "stored", "png")
  assert config.allow_absolute_paths and config.follow_symlinks and config.verify_images
  assert config.include_masks and config.overwrite and config.max_side == 64
  assert (config.jpeg_quality, config.max_image_bytes, config.writer_processes) == (80, 1234, 2)
  assert config.shard_name_template == "{split}-{index}.tfrecord"
  assert (config.classes, config.class_map, config.classes_file, config.class_descriptions) == (
      "a,b", "a=c", os.path.join(here, "names.txt"), os.path.join(here, "d.csv"))
  assert config.label_map == os.path.join(here, "l.pbtxt")
  assert (config.layout, config.dataset_name, config.dataset_version) == ("tfds", "ds", "2.0.1")
  # the options --append superseded: one line naming it, exit 2 (cli.main)
  for retired in (["--incremental"], ["--plan-from", "earlier"], ["--plan-from=earlier"]):
    args, _ = cli.make_parser().parse_known_args(
        ["convert", "--input", "a", "--output", "o", *retired])
    with pytest.raises(UsageError, match=f"^{retired[0].split('=')[0]} was retired: "
                                          "scheduled runs use --append"):
      convert_config.build(args)
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


# ---------------------------------------------------------------------------------------------
# Options that used to fail only after the whole run (issue 30): refused before running


def test_dataset_version_follows_tfds_own_rule():
  """finalize/tfds_layout.VERSION_RE is TFDS's regex, copied (the launcher does not import
  TFDS): every version it accepts, TFDS loads; leading zeros (01.2.3), which TFDS refuses,
  are exit 2."""
  import tensorflow_datasets as tfds
  for version in ("1.0.0", "0.0.0", "10.20.300", "01.2.3", "1.02.3", "1.2.03", "00.0.0", "1.2",
                  "1.2.3.4", "v1.2.3", "1.2.x", "-1.2.3", "1.2.3 ", ""):
    config = ConvertConfig(format="csv", inputs=["a.csv"], output="/o", layout="tfds",
                           dataset_name="ok", dataset_version=version)
    try:
      config.validate()
      ours = True
    except ValueError as e:
      assert "--dataset-version" in str(e) and "MAJOR.MINOR.PATCH" in str(e), e
      ours = False
    assert ours == tfds.core.Version.is_valid(version), version
  # where TFDS's \d and $ are looser than the directory it then looks for
  for version in ("1.2.3\n", "\u0661.2.3"):
    with pytest.raises(ValueError, match="--dataset-version"):
      ConvertConfig(format="csv", inputs=["a.csv"], output="/o", layout="tfds",
                    dataset_name="ok", dataset_version=version).validate()


def test_dataset_version_with_leading_zeros_is_exit_2(dataset, tmp_path, capsys):
  out = tmp_path / "o"
  code = cli.main(["convert", "--format=csv", *dataset.inputs("csv"), "--output", str(out),
                   "--layout", "tfds", "--dataset-name", "ok", "--dataset-version", "01.2.3",
                   "--runner=FnApiRunner"])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1, err
  assert "--dataset-version '01.2.3': give MAJOR.MINOR.PATCH, numbers without leading zeros" \
      in err
  assert not out.exists()


def _resolved(tmp_path, template: str, **settings) -> ConvertConfig:
  from beam_tfrecord.config import resolve
  return resolve(ConvertConfig(format="coco", inputs=["train=a.json", "validation=b.json"],
                               output=str(tmp_path / "o"), shard_name_template=template,
                               **settings))


def test_shard_names_longer_than_a_file_name_are_refused(tmp_path):
  from beam_tfrecord.errors import UsageError
  pad = "x" * (255 - len("validation-0-1.rec"))  # 255 bytes with the longest split
  _resolved(tmp_path, pad + "{split}-{index}-{count}.rec")  # fits: accepted
  with pytest.raises(UsageError, match=r"gives names of 256 bytes \(split 'validation', index "
                     r"0, num_shards 1, count 1\); a file name may have at most 255 bytes$"):
    _resolved(tmp_path, pad + "{split}-{index}-{count}.recx")
  # bytes, not characters: 'é' is two
  with pytest.raises(UsageError, match="gives names of 272 bytes"):
    _resolved(tmp_path, "é" * 127 + "{split}-{index}-{count}.rec")
  # the largest index, shard count and record count the options allow
  fits = "x" * (255 - len("validation-9-of-10-1.rec")) + \
      "{split}-{index}-of-{num_shards}-{count}.rec"
  _resolved(tmp_path, fits, num_shards=10)
  with pytest.raises(UsageError, match=r"index 99, num_shards 100, count 1\)"):
    _resolved(tmp_path, fits, num_shards=100)
  with pytest.raises(UsageError, match=r"index 0, num_shards 1, count 1000\)"):
    _resolved(tmp_path, fits, records_per_shard=1000)
  # padding counts as given
  with pytest.raises(UsageError, match="gives names of 311 bytes"):
    _resolved(tmp_path, "{split}-{index:0300d}")
  # an earlier output's kept shards are linked under NAME.link-PID first
  with pytest.raises(UsageError, match="at most 239 bytes here"):
    _resolved(tmp_path, "x" * 230 + "{split}-{index}-{count}.rec", append=True)


@pytest.mark.e2e
def test_long_shard_name_template_is_exit_2_before_running(dataset, tmp_path, capsys):
  """Was exit 1 after the whole run (the rename to a 260-byte name failed); now one line,
  exit 2, and no output directory. A name of 255 bytes is written and read back."""
  out = tmp_path / "o"
  args = ["convert", "--format=csv", *dataset.inputs("csv"), "--runner=FnApiRunner"]
  code = cli.main([*args, "--output", str(out), "--shard-name-template",
                   "x" * 250 + "{split}-{index}.tfrecord"])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1, err
  assert "a file name may have at most 255 bytes" in err and not out.exists()
  template = "x" * (255 - len("train-0")) + "{split}-{index}"  # 'train' is the longest split
  assert cli.main([*args, "--output", str(out), "--num-shards", "1",
                   "--shard-name-template", template]) == 0
  from conftest import read_shard
  names = sorted(p.name for p in out.iterdir() if p.name.startswith("x"))
  assert [len(n) for n in names] == [255, 253]  # train-0, val-0
  assert sum(len(read_shard(out / n)) for n in names) == len(dataset.images)

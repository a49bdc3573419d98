"""--records-per-shard and --shard-name-template: fields, filling, and clashes found before
anything is written."""
from __future__ import annotations

import os

import pytest

from beam_tfrecord import sharding
from beam_tfrecord.errors import UsageError

import bad_data as bd
from conftest import read_shard

# ---------------------------------------------------------------------------------------------
# Pure: templates, plans, clashes
# ---------------------------------------------------------------------------------------------


def test_default_template_gives_the_default_names():
  assert sharding.format_shard_name(sharding.DEFAULT_SHARD_NAME_TEMPLATE, "val", 3, 8, 99) == \
      sharding.shard_name("val", 3, 8) == "val-00003-of-00008.tfrecord"


def test_template_fields():
  assert sharding.template_fields("file_{index:02d}-{count}.tfrec") == {"index", "count"}
  assert sharding.format_shard_name("{split}/{index}", "a", 1, 2, 3) == "a/1"  # formatting only
  assert sharding.format_shard_name("{split}.{index:03d}.{num_shards}.{count:04d}.rec",
                                    "train", 7, 12, 41) == "train.007.12.0041.rec"


@pytest.mark.parametrize("template", [
    "{shard}.tfrecord", "{0}.tfrecord", "{}.tfrecord", "{index:q}.rec", "{split!z}-{index}",
    "{index", "{split}/{index}.rec", ".{split}-{index}", "{split[0]}-{index}",
])
def test_bad_templates_are_usage_errors(template):
  with pytest.raises(UsageError):
    sharding.template_fields(template)


def test_build_time_clash_rules():
  sharding.check_template("{split}-{index}.rec", None, None)
  sharding.check_template("file_{index:02d}-{count}.tfrec", {"train"}, None)  # one split
  sharding.check_template("{split}.rec", {"train", "val"}, 1)  # one shard per split
  with pytest.raises(UsageError, match="no {index}"):
    sharding.check_template("{split}-{count}.rec", {"train"}, None)
  with pytest.raises(UsageError, match="no {split}"):
    sharding.check_template("{index}.rec", {"train", "val"}, None)
  with pytest.raises(UsageError, match="no {split}"):
    sharding.check_template("{index}.rec", None, None)  # a CSV split column may give several


def _plan(split, n_keys, **kwargs):
  return sharding.plan_split(split, [(f"k{i:03d}", 10) for i in range(n_keys)],
                             kwargs.get("num_shards"), None, kwargs.get("records_per_shard"))


def test_shard_names_detects_a_clash_the_template_allows():
  # '{split}{index}': split a shard 10 and split a1 shard 0 are both 'a10'
  plans = [_plan("a", 11, num_shards=11), _plan("a1", 3, num_shards=2)]
  with pytest.raises(ValueError, match="'a10'"):
    sharding.shard_names(plans, "{split}{index}")
  names = sharding.shard_names(plans, "{split}-{index}-{count}")
  assert names[("a", 10)] == "a-10-1" and names[("a1", 0)] == "a1-0-1"


def test_records_per_shard_fills_in_key_order_and_keeps_images_whole():
  items = [("a", 1, 3), ("b", 1, 3), ("c", 1, 0), ("d", 1, 5), ("e", 1, 1), ("f", 1, 9),
           ("g", 1, 2)]
  plan = sharding.plan_split("train", items, None, None, 6)
  assert plan.boundaries == ("a", "d", "f", "g")
  assert plan.records == (6, 6, 9, 2)  # the 9-record image gets a shard of its own
  assert [plan.shard_of(k) for k, *_ in items] == [0, 0, 0, 1, 1, 2, 3]
  assert plan.num_shards == 4 and plan.count == 7
  # one record per image: 939 images in shards of 4096 -> one shard
  assert sharding.plan_split("train", [(f"{i}", 1) for i in range(939)], None, None,
                             4096).records == (939,)


# ---------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------


def _convert(dataset, output, *extra, fmt="coco"):
  return bd.convert([f"--format={fmt}", *dataset.inputs(fmt), "--output", str(output), *extra])


def test_records_per_shard_and_template_fields(dataset, tmp_path):
  template = "{split}_{index:02d}of{num_shards}-{count}.tfrec"
  run = _convert(dataset, tmp_path / "out", "--records-per-shard=5",
                 f"--shard-name-template={template}")
  assert run.code == 0
  per_split = {s: sum(1 for im in dataset.images if im.split == s) for s in dataset.splits}
  expected_files = set()
  for split, total in per_split.items():
    counts = [5] * (total // 5) + ([total % 5] if total % 5 else [])
    names = [f"{split}_{i:02d}of{len(counts)}-{c}.tfrec" for i, c in enumerate(counts)]
    assert [s["path"] for s in run.manifest["splits"][split]["shards"]] == names
    for name, count in zip(names, counts):
      records = read_shard(tmp_path / "out" / name)
      assert len(records) == count
    expected_files.update(names)
  on_disk = {f for f in os.listdir(tmp_path / "out") if f.endswith(".tfrec")}
  assert on_disk == expected_files
  assert not [f for f in os.listdir(tmp_path / "out") if f.startswith(".tmp")]
  assert len(run.examples) == len(dataset.images)  # reader.load follows the manifest
  from beam_tfrecord import output as outputs
  assert outputs.verify(str(tmp_path / "out")) == 0


def test_records_per_shard_output_is_deterministic(dataset, tmp_path):
  args = ("--records-per-shard=4", "--shard-name-template={split}-{index}-{count}.rec")
  first, second = (_convert(dataset, tmp_path / name, *args) for name in ("a", "b"))
  files = sorted(f for f in os.listdir(tmp_path / "a") if f.endswith(".rec"))
  assert files == sorted(f for f in os.listdir(tmp_path / "b") if f.endswith(".rec"))
  for name in files:
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("template,extra", [
    ("{split}-{count}.rec", []),                  # no {index}: shards of a split clash
    ("{index}.rec", []),                          # no {split}: train and val clash
    ("{split}/{index}.rec", []),                  # not a file name
    ("{split}-{index}-{shard}.rec", []),          # unknown field
])
def test_clash_is_a_usage_error_before_anything_is_written(dataset, tmp_path, capsys, template,
                                                           extra):
  output = tmp_path / "out"
  with pytest.raises(SystemExit) as exit_info:
    _convert(dataset, output, f"--shard-name-template={template}", *extra)
  assert exit_info.value.code == 2
  assert "--shard-name-template" in capsys.readouterr().err
  assert not output.exists()


def test_clash_found_by_the_plan_step_writes_nothing(dataset, tmp_path):
  """'{split}{index}' passes the build-time rules, but with splits 'a' (11 shards) and 'a1'
  the plan step finds 'a10' twice and fails the run before any shard is written."""
  output = tmp_path / "out"
  with pytest.raises(Exception, match="same name"):
    _convert(dataset, output, "--split=a=0.6,a1=0.4", "--num-shards=11",
             "--shard-name-template={split}{index}.rec")
  written = [os.path.join(d, f) for d, _, files in os.walk(output) for f in files]
  assert not [f for f in written if f.endswith(".rec") or ".part-" in f], written
  assert not os.path.exists(output / "manifest.json")


def test_beam_sink_refuses_templates(dataset, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_info:
    _convert(dataset, tmp_path / "out", "--sink=beam", "--records-per-shard=3")
  assert exit_info.value.code == 2

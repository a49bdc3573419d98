"""plan/naming.py: shard file names, --shard-name-template and --records-per-shard: fields,
filling, and clashes found before anything is written."""
from __future__ import annotations

import os
import re
from pathlib import Path

import bad_data as bd
import pytest
from conftest import read_shard

from beam_tfrecord.errors import UsageError
from beam_tfrecord.plan import naming, shard_plan

# ---------------------------------------------------------------------------------------------
# Pure: templates, plans, clashes
# ---------------------------------------------------------------------------------------------


def test_shard_name():
  assert naming.shard_name("train", 3, 8) == "train-00003-of-00008.tfrecord"
  assert naming.shard_name("val", 0, 1) == "val-00000-of-00001.tfrecord"
  assert naming.shard_name("test", 12, 100, suffix=".rec") == "test-00012-of-00100.rec"
  names = [naming.shard_name("train", i, 1200) for i in range(1200)]
  assert names == sorted(names)  # lexical order is shard order
  assert all(re.fullmatch(r"train-\d{5}-of-01200\.tfrecord", n) for n in names)


def test_default_template_gives_the_default_names():
  assert naming.format_shard_name(naming.DEFAULT_SHARD_NAME_TEMPLATE, "val", 3, 8, 99) == \
      naming.shard_name("val", 3, 8) == "val-00003-of-00008.tfrecord"


def test_template_fields():
  assert naming.template_fields("file_{index:02d}-{count}.tfrec") == {"index", "count"}
  with pytest.raises(ValueError):  # every name formatted is checked, not one sample
    naming.format_shard_name("{split}/{index}", "a", 1, 2, 3)
  assert naming.format_shard_name("{split}.{index:03d}.{num_shards}.{count:04d}.rec",
                                    "train", 7, 12, 41) == "train.007.12.0041.rec"


@pytest.mark.parametrize("template", [
    "{shard}.tfrecord", "{0}.tfrecord", "{}.tfrecord", "{index:q}.rec", "{split!z}-{index}",
    "{index", "{split}/{index}.rec", ".{split}-{index}", "{split[0]}-{index}",
])
def test_bad_templates_are_usage_errors(template):
  with pytest.raises(UsageError):
    naming.template_fields(template)


def test_build_time_clash_rules():
  naming.check_template("{split}-{index}.rec", None, None)
  naming.check_template("file_{index:02d}-{count}.tfrec", {"train"}, None)  # one split
  naming.check_template("{split}.rec", {"train", "val"}, 1)  # one shard per split
  with pytest.raises(UsageError, match="no {index}"):
    naming.check_template("{split}-{count}.rec", {"train"}, None)
  with pytest.raises(UsageError, match="no {split}"):
    naming.check_template("{index}.rec", {"train", "val"}, None)
  with pytest.raises(UsageError, match="no {split}"):
    naming.check_template("{index}.rec", None, None)  # a CSV split column may give several


def _plan(split, n_keys, **kwargs):
  return shard_plan.plan_split(
      split, shard_plan.counts_of((f"k{i:03d}", 10, 1) for i in range(n_keys)),
      kwargs.get("num_shards"), None, kwargs.get("records_per_shard"))


def test_shard_names_detects_a_clash_the_template_allows():
  # '{split}{index}': split a shard 10 and split a1 shard 0 are both 'a10'
  plans = [_plan("a", 11, num_shards=11), _plan("a1", 3, num_shards=2)]
  with pytest.raises(ValueError, match="'a10'"):
    naming.shard_names(plans, "{split}{index}")
  names = naming.shard_names(plans, "{split}-{index}-{count}")
  assert names[("a", 10)] == "a-10-1" and names[("a1", 0)] == "a1-0-1"




# ---------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------


def _convert(dataset, output, *extra, fmt="coco"):
  return bd.convert([f"--format={fmt}", *dataset.inputs(fmt), "--output", str(output), *extra])


CUSTOM_NAMED = ("--records-per-shard=5",
                "--shard-name-template={split}_{index:02d}of{num_shards}-{count}.tfrec")


@pytest.fixture(scope="module")
def custom_named(dataset, tmp_path_factory):
  """A run with --records-per-shard and a custom template, made once: the tests read it, or
  change a copy of it."""
  output = tmp_path_factory.mktemp("naming") / "out"
  return _convert(dataset, output, *CUSTOM_NAMED)


def _copy(run, output):
  import shutil
  shutil.copytree(run.output, output, symlinks=True)
  return output


@pytest.mark.e2e
def test_records_per_shard_and_template_fields(dataset, custom_named):
  run = custom_named
  assert run.code == 0
  out = Path(run.output)
  per_split = {s: sum(1 for im in dataset.images if im.split == s) for s in dataset.splits}
  expected_files = set()
  for split, total in per_split.items():
    counts = [5] * (total // 5) + ([total % 5] if total % 5 else [])
    names = [f"{split}_{i:02d}of{len(counts)}-{c}.tfrec" for i, c in enumerate(counts)]
    assert [s["path"] for s in run.manifest["splits"][split]["shards"]] == names
    for name, count in zip(names, counts):
      records = read_shard(out / name)
      assert len(records) == count
    expected_files.update(names)
  on_disk = {f for f in os.listdir(out) if f.endswith(".tfrec")}
  assert on_disk == expected_files
  assert not [f for f in os.listdir(out) if f.startswith(".")]
  assert len(run.examples) == len(dataset.images)  # reader.load follows the manifest
  # the run owns its custom-named shards: listed in the manifest, moved by the commit
  assert expected_files <= set(run.manifest["files"])
  from beam_tfrecord.readback import verify
  assert verify.check(str(out))[1] == []


@pytest.mark.e2e
def test_verify_knows_custom_names_and_still_finds_strays(custom_named, tmp_path):
  assert custom_named.code == 0
  output = _copy(custom_named, tmp_path / "out")  # custom names: {split}_{index:02d}of...
  from beam_tfrecord.readback import verify
  assert verify.check(str(output))[1] == []
  (output / "train-00000-of-00002.tfrecord").write_bytes(b"")  # a default-named stray
  (output / "val_07of9-3.tfrec").write_bytes(b"")              # one named like ours
  problems = verify.check(str(output))[1]
  assert sorted(p.split(":")[0] for p in problems) == ["train-00000-of-00002.tfrecord",
                                                       "val_07of9-3.tfrec"]
  assert all("stray record file" in p for p in problems)


@pytest.mark.e2e
def test_overwrite_replaces_custom_named_shards(dataset, custom_named, tmp_path):
  """--overwrite removes what the previous manifest lists, custom names included."""
  assert custom_named.code == 0
  output = _copy(custom_named, tmp_path / "out")
  first = {f for f in os.listdir(output) if f.endswith(".tfrec")}
  assert len(first) == sum(len(s["shards"]) for s in custom_named.manifest["splits"].values())
  assert len(first) > 2
  run = _convert(dataset, output, "--num-shards=1", "--overwrite")
  assert run.code == 0
  assert not {f for f in os.listdir(output) if f.endswith(".tfrec")}
  from beam_tfrecord.readback import verify
  assert verify.check(str(output))[1] == []


@pytest.mark.e2e
def test_records_per_shard_output_is_deterministic(dataset, custom_named, tmp_path):
  first = Path(custom_named.output)  # and a second run of the same arguments
  second = tmp_path / "b"
  assert _convert(dataset, second, *CUSTOM_NAMED).code == 0
  files = sorted(f for f in os.listdir(first) if f.endswith(".tfrec"))
  assert files and files == sorted(f for f in os.listdir(second) if f.endswith(".tfrec"))
  for name in files:
    assert (first / name).read_bytes() == (second / name).read_bytes()


@pytest.mark.parametrize("template,extra", [
    ("{split}-{count}.rec", []),                  # no {index}: shards of a split clash
    ("{index}.rec", []),                          # no {split}: train and val clash
    ("{split}/{index}.rec", []),                  # not a file name
    ("{split}-{index}-{shard}.rec", []),          # unknown field
])
def test_clash_is_a_usage_error_before_anything_is_written(dataset, tmp_path, capsys, template,
                                                           extra):
  output = tmp_path / "out"
  from beam_tfrecord import cli
  code = cli.main(["convert", "--format=coco", *dataset.inputs("coco"), "--output",
                   str(output), f"--shard-name-template={template}", *extra, bd.RUNNER])
  err = capsys.readouterr().err
  assert code == 2 and "--shard-name-template" in err
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err  # one line
  assert not output.exists()


# Templates whose sample name ('train', shard 1 of 2) is plain but whose names for other
# splits are not: a fill character pads short split names only. '{split:/^5}' makes 'val'
# '/val/' (a directory at the file system's root); '{split:.>5}' makes it a hidden '..val'.
SPLIT_DEPENDENT = ["{split:/>12}-{index}.tfrecord", "{split:/>5}-{index}.tfrecord",
                   "{split:/^5}probe-{index}.rec", "{split:\\>5}-{index}.rec",
                   "{split:.>5}-{index}.rec"]


@pytest.mark.parametrize("template", SPLIT_DEPENDENT)
def test_names_are_checked_for_every_split_and_shard(template):
  for shards in (2, None):  # with the shard counts known or not (--shard-size-mb)
    with pytest.raises(UsageError, match="--shard-name-template"):
      naming.check_names(template, {"train", "val"}, shards)
  plans = [_plan("train", 3, num_shards=1), _plan("val", 3, num_shards=1)]
  with pytest.raises(ValueError, match="nothing was written"):  # the plan step's check
    naming.shard_names(plans, template)


def test_separators_anywhere_in_a_template_are_refused_whatever_the_splits():
  """Splits may be known only once the data is read: a separator in the text or a format
  spec is refused by itself."""
  for template in ("{split:/>5}-{index}", "{split:/>12}-{index}", "{index:/>3}-{split}",
                   "/tmp/x-{split}", "x\\{split}-{index}"):
    with pytest.raises(UsageError):
      naming.template_fields(template)


def test_check_names_enumerates_known_splits_and_shard_counts():
  naming.check_names("{split}-{index}.rec", {"a", "a1"}, 11)
  with pytest.raises(UsageError, match="'a10.rec'"):
    naming.check_names("{split}{index}.rec", {"a", "a1"}, 11)
  with pytest.raises(UsageError, match="own"):
    naming.check_names("{split}.json", {"manifest"}, 1)
  naming.check_names("{index}{num_shards}.rec", {"train"}, 12)  # one split: n is fixed
  with pytest.raises(UsageError, match="same name"):  # 'a' 1 of 12 vs 'a1' ... of 2: a112
    naming.check_names("{split}{index}{num_shards}.rec", {"a", "a1"}, 12)
  naming.check_names("{split}{index}-{count}.rec", {"a", "a1"}, 11)  # {count}: the plan step


def test_a_shard_may_not_take_the_name_of_the_card(dataset, tmp_path, capsys):
  """README.md is the dataset card, written after the shards: a shard named so would be
  replaced by it (exit 0, data gone). Refused before anything is written."""
  output = tmp_path / "out"
  run = bd.convert(["--format=coco", f"--input={dataset.coco_file('train')}",
                    f"--images={dataset.image_dir}", "--output", str(output), "--num-shards=1",
                    "--shard-name-template=README.md"], capsys)
  assert run.code == 2 and "'README.md'" in run.stderr and "own" in run.stderr
  assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
  assert not output.exists()


def test_known_clash_is_exit_2_before_anything_is_written(dataset, tmp_path, capsys):
  """'{split}{index}' passes the template rules, but with splits 'a' and 'a1' known and up to
  11 shards each, 'a10' can name two shards: refused when the pipeline is built."""
  output = tmp_path / "out"
  run = bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(output),
                    "--split=a=0.6,a1=0.4", "--num-shards=11",
                    "--shard-name-template={split}{index}.rec"], capsys)
  assert run.code == 2 and "'a10.rec'" in run.stderr
  assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
  assert not output.exists()


@pytest.mark.e2e
def test_clash_found_by_the_plan_step_writes_nothing(dataset, tmp_path, capsys):
  """With --shard-size-mb the shard counts are known only once the data is read: the plan
  step finds 'a10' twice and fails the run before any shard is written."""
  output = tmp_path / "out"
  run = bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(output),
                    "--split=a=0.6,a1=0.4", "--shard-size-mb=0.000001",
                    "--shard-name-template={split}{index}.rec"], capsys)
  assert run.code == 1 and "same name" in run.stderr
  written = [os.path.join(d, f) for d, _, files in os.walk(output) for f in files]
  assert not [f for f in written if f.endswith(".rec") or ".part-" in f], written
  assert not os.path.exists(output / "manifest.json")


@pytest.mark.parametrize("template,extra", [
    *[(t, ["--num-shards=2"]) for t in SPLIT_DEPENDENT],
    ("{split:.>5}-{index}.rec", ["--shard-size-mb=1"]),  # shard counts unknown at build time
    ("/tmp/x-{split}", ["--num-shards=1"]),  # no {index} needed: an absolute name
    ("{split:/^5}x", ["--num-shards=1"]),    # the same for split val only: '/val/x'
])
def test_a_template_naming_files_outside_is_exit_2_before_anything_is_written(
    dataset, tmp_path, capsys, template, extra):
  """A reproduced failure: names were checked on one sample with split 'train'; a fill put
  '/' into val's names, whose shards went to the file system's root, and verify said OK."""
  output = tmp_path / "out"
  run = bd.convert(["--format=coco", *dataset.inputs("coco"), "--output", str(output),
                    f"--shard-name-template={template}", *extra], capsys)
  assert run.code == 2 and "--shard-name-template" in run.stderr
  assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
  assert not output.exists()


def test_beam_sink_refuses_templates(dataset, tmp_path, capsys):
  run = _convert(dataset, tmp_path / "out", "--sink=beam", "--records-per-shard=3")
  assert run.code == 2

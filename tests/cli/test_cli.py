"""The command line: help texts, the pipelines/ entry points, the demo, output-directory rules."""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import (REPO, check_all_images, check_manifest, read_output,
                      run_cli, run_python)
from PIL import Image

from beam_tfrecord import cli
from beam_tfrecord.sources import registry

CONVERT_OPTIONS = ("--format", "--input", "--images", "--output", "--label-map", "--split",
                   "--num-shards", "--shard-size-mb", "--sink", "--csv-columns", "--bbox-policy",
                   "--allow-absolute-paths", "--overwrite")


# ---------------------------------------------------------------------------------------------
# Help
# ---------------------------------------------------------------------------------------------

def test_top_level_help(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for word in ("convert", "demo", "inspect", "show", "verify", "--version"):
    assert word in out, word


def test_convert_help_mentions_every_option():
  result = run_python(["-m", "beam_tfrecord.cli", "convert", "--help"])
  assert result.returncode == 0, result.stderr
  text = result.stdout
  for option in CONVERT_OPTIONS:
    assert re.search(rf"(^|\s){re.escape(option)}\b", text), option
  # Beam's own options are passed through, and the help says so
  assert "--runner" in text and "--direct_num_workers" in text
  # every option the parser knows is documented, not only the ones listed above
  for action in cli.convert_options():
    for option in action.option_strings:
      if option.startswith("--"):
        assert option in text, option
    if action.option_strings and action.dest != "help":
      assert action.help and action.help.strip(), f"{action.option_strings} has no help"


def test_class_map_help_says_the_pairs_apply_at_once():
  """cat=dog,dog=person maps cats to dog and dogs to person, never cat to person (tested in
  tests/prepare/test_class_selection.py): --help says so."""
  text = " ".join(a.help for a in cli.convert_options() if "--class-map" in a.option_strings)
  assert "at once, not one after another" in text and "never cat as person" in text


def test_demo_help_and_version(capsys):
  from beam_tfrecord import __version__
  with pytest.raises(SystemExit) as e:
    cli.main(["demo", "--help"])
  out = capsys.readouterr().out
  assert e.value.code == 0 and "--output" in out and "--format" in out and "--images" in out
  with pytest.raises(SystemExit) as e:
    cli.main(["--version"])
  assert e.value.code == 0 and __version__ in capsys.readouterr().out


@pytest.mark.e2e
def test_console_script_entry_point():
  """setup.py installs `beam-tfrecord` as beam_tfrecord.cli:console (main, then a fast exit);
  run it when installed: main's exit code and every line it printed to a pipe arrive."""
  setup = (REPO / "setup.py").read_text(encoding="utf-8")
  match = re.search(r"[\"']beam-tfrecord\s*=\s*([\w.]+):(\w+)[\"']", setup)
  assert match, "no beam-tfrecord console script in setup.py"
  assert getattr(importlib.import_module(match.group(1)), match.group(2)) is cli.console
  import subprocess

  from conftest import subprocess_env
  script = Path(sys.executable).parent / "beam-tfrecord"  # installed by `pip install -e .`
  commands = [[sys.executable, "-m", "beam_tfrecord.cli"]] + ([[str(script)]] if script.exists()
                                                               else [])
  for command in commands:
    result = subprocess.run(command + ["convert", "--help"], capture_output=True, text=True,
                            env=subprocess_env(), timeout=120)
    assert result.returncode == 0 and "--num-shards" in result.stdout
    result = subprocess.run(command + ["convert", "--format=coco", "--input=missing.json",
                                       "--output=o"], capture_output=True, text=True,
                            env=subprocess_env(), timeout=120, cwd=str(REPO / "tests"))
    assert result.returncode == 2 and "missing.json" in result.stderr, result.stderr


@pytest.mark.parametrize("module", [f"{fmt.replace('-', '_')}_to_tfrecord"
                                    for fmt in registry.FORMATS])
def test_pipeline_modules_help(module, capsys):
  mod = importlib.import_module(f"pipelines.{module}")
  with pytest.raises(SystemExit) as e:
    mod.run(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for option in CONVERT_OPTIONS[1:]:  # --format is fixed by the module
    assert option in out, option


@pytest.mark.parametrize("argv,message", [
    (["convert", "--format=coco", "--input=a.json", "--output=o", "--num-shards=0"],
     "num-shards"),
    (["convert", "--format=coco", "--input=a.json", "--output=o", "--split=train=0.5"],
     "sum to 1"),
    (["convert", "--format=coco", "--input=a.json", "--output=o", "--num-shards=2",
      "--shard-size-mb=5"], "not allowed with"),
    *[(["convert", "--format=coco", "--input=a.json", "--output=o", f"--shard-size-mb={mb}"],
       "--shard-size-mb must be a positive number") for mb in ("nan", "inf", "-inf", "0")],
    (["convert", "--format=labelme2", "--input=a.json", "--output=o"], "invalid choice"),
    (["convert", "--format=coco", "--input=a.json"], "--output"),
    (["convert", "--format=csv", "--input=a.csv", "--output=o", "--csv-columns=file=path"],
     "column mapping"),
    (["convert", "--format=coco", "--input=a.json", "--output=o", "stray"], "stray"),
    (["inspect", "somewhere", "--runner=DirectRunner"], "unrecognized"),
    (["convert", "--format=coco", "--input=a.json", "--output=o", "--writer-processes=-1"],
     "--writer-processes must be 0 (automatic) or more"),
    (["convert", "--format=coco", "--input=a.json", "--output=o", "--writer-processes=two"],
     "invalid int value"),
])
def test_usage_errors(argv, message, capsys, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert message in err
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
  assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------
# pipelines/ entry points, Beam options passed through
# ---------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_coco_pipeline_module_as_subprocess(dataset, tmp_path):
  out = tmp_path / "out"
  result = run_python(["-m", "pipelines.coco_to_tfrecord", *dataset.inputs("coco"),
                       f"--output={out}", "--num-shards=2", "--runner=DirectRunner",
                       "--direct_num_workers=1", "--direct_running_mode=in_memory"])
  assert result.returncode == 0, result.stderr[-3000:]
  output = read_output(out)
  check_all_images(output, dataset, "coco", dataset.coco_category_ids(), any_order=True)
  check_manifest(output, dataset, "coco", dataset.coco_category_ids())
  assert output.manifest["format"] == "coco"
  assert "--direct_num_workers=1" in output.manifest["args"]
  assert all(len(files) == 2 for files in output.shard_files.values())


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["voc", "csv"])
def test_voc_and_csv_pipeline_modules(fmt, small_dataset, tmp_path):
  mod = importlib.import_module(f"pipelines.{fmt}_to_tfrecord")
  out = tmp_path / "out"
  assert mod.run([*small_dataset.inputs(fmt), f"--output={out}", "--runner=FnApiRunner"]) == 0
  output = read_output(out)
  check_all_images(output, small_dataset, fmt, small_dataset.sorted_name_ids())
  assert output.manifest["format"] == fmt


@pytest.mark.e2e
def test_yolo_and_folders_pipeline_modules(small_dataset, tmp_path):
  """The entry points the Airflow DAG runs for --format yolo and folders fix the format."""
  import layouts

  from beam_tfrecord.readback.reader import load
  yolo = importlib.import_module("pipelines.yolo_to_tfrecord")
  yaml_path = layouts.write_ultralytics(small_dataset.images, small_dataset.image_dir,
                                        tmp_path / "yolo")
  assert yolo.run(["--input", str(yaml_path), f"--output={tmp_path / 'y'}",
                   "--runner=FnApiRunner"]) == 0
  folders = importlib.import_module("pipelines.folders_to_tfrecord")
  root = layouts.write_class_folders(small_dataset.images, small_dataset.image_dir,
                                     tmp_path / "folders")
  assert folders.run(["--input", str(root), f"--output={tmp_path / 'f'}",
                      "--runner=FnApiRunner"]) == 0
  for out, fmt in ((tmp_path / "y", "yolo"), (tmp_path / "f", "folders")):
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == fmt and manifest["status"] == "ok"
    assert manifest["totals"]["examples"] == len(small_dataset.images)
    assert sum(sum(1 for _ in load(str(out), split=split))
               for split in manifest["splits"]) == len(small_dataset.images)


def test_unknown_options_reach_beam(small_dataset, tmp_path, capsys):
  """An option the tool does not know is a Beam pipeline option; a runner Beam does not know
  is one line and exit 2 (no 'did you mean' for a name close to none), nothing written."""
  assert cli.main(["convert", "--format=csv", *small_dataset.inputs("csv"),
                   f"--output={tmp_path / 'out'}", "--runner=NoSuchRunner"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("beam-tfrecord: error: unknown --runner NoSuchRunner: Beam knows ")
  assert err.count("\n") == 1 and "DirectRunner" in err and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Output directory rules
# ---------------------------------------------------------------------------------------------

def test_non_empty_output_is_refused_with_a_clear_message(small_dataset, tmp_path, capsys):
  out = tmp_path / "out"
  out.mkdir()
  (out / "notes.txt").write_text("mine")
  code = cli.main(["convert", "--format=csv", *small_dataset.inputs("csv"), f"--output={out}",
                   "--runner=FnApiRunner"])  # returns: no traceback for a usage problem
  assert code != 0
  err = capsys.readouterr().err
  assert "did not write: notes.txt" in err and str(out) in err
  assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
  assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.e2e
def test_overwrite_replaces_an_earlier_run(small_dataset, tmp_path):
  """The first run gives its Beam options space-separated (--runner FnApiRunner
  --direct_num_workers 1), the second as --runner=FnApiRunner."""
  out = tmp_path / "out"
  args = ["convert", "--format=csv", *small_dataset.inputs("csv"), f"--output={out}"]
  run_cli(*args, "--num-shards=2", "--runner", "FnApiRunner", "--direct_num_workers", "1")
  assert len(list(out.glob("*-of-00002.tfrecord"))) == 4
  run_cli(*args, "--num-shards=1", "--overwrite", "--runner=FnApiRunner")
  assert sorted(p.name for p in out.glob("*.tfrecord")) == \
      ["train-00000-of-00001.tfrecord", "val-00000-of-00001.tfrecord"]
  output = read_output(out)
  check_all_images(output, small_dataset, "csv", small_dataset.sorted_name_ids())


# ---------------------------------------------------------------------------------------------
# The demo, exactly as the README shows it
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def readme_demo(tmp_path_factory):
  """`beam-tfrecord demo` with no arguments, in an empty directory (what scripts/demo.sh does)."""
  cwd = tmp_path_factory.mktemp("demo")
  stdout = io.StringIO()
  old = os.getcwd()
  os.chdir(cwd)
  try:
    with contextlib.redirect_stdout(stdout):
      code = cli.main(["demo"])
  finally:
    os.chdir(old)
  return cwd, code, stdout.getvalue()


def _readme_demo_block() -> list:
  readme = (REPO / "README.md").read_text(encoding="utf-8")
  for block in re.findall(r"```[^\n]*\n(.*?)```", readme, flags=re.S):
    if "sample dataset:" in block and "verify:" in block:
      return [line for line in block.splitlines() if line.strip()]
  raise AssertionError("README.md has no demo output block")


@pytest.mark.e2e
def test_demo_output_matches_the_readme(readme_demo):
  cwd, code, stdout = readme_demo
  assert code == 0, stdout
  assert "demo" in (REPO / "scripts" / "demo.sh").read_text()
  got = [line for line in stdout.splitlines() if line.strip()]
  position = 0
  for line in _readme_demo_block():
    # sizes in MB and the run time vary; every other word and number must be as documented
    pattern = re.sub(r"(?:\\ )+", r"\\s+", re.escape(line.strip()))
    pattern = re.sub(r"\d+\\\.\d+", r"\\d+\\.\\d+", pattern)
    for i in range(position, len(got)):
      if re.fullmatch(pattern, got[i].strip()):
        position = i + 1
        break
    else:
      raise AssertionError(f"README line {line!r} not in the demo output:\n{stdout}")


@pytest.mark.e2e
def test_demo_output_is_valid(readme_demo):
  cwd, code, stdout = readme_demo
  out = cwd / "demo-output" / "tfrecords"
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["status"] == "ok" and manifest["errors"]["count"] == 0
  images = sorted((cwd / "demo-output" / "data" / "images").iterdir())
  assert manifest["totals"]["examples"] == len(images) > 0
  assert f"verify: {len(images)} examples parsed with TensorFlow: OK" in stdout
  output = read_output(out)
  assert sorted(output.by_filename()) == sorted(p.name for p in images)
  with Image.open(cwd / "demo-output" / "show.png") as picture:  # drawn from the records
    assert picture.format == "PNG" and picture.size[0] > 4 * 256
  assert (out / "README.md").read_text(encoding="utf-8").startswith("# tfrecords: dataset card")


@pytest.mark.e2e
@pytest.mark.parametrize("fmt,runs", [("voc", 1), ("csv", 2)])
def test_demo_other_formats_and_rerun(fmt, runs, tmp_path, capsys):
  for _ in range(runs):  # a second run into the same directory replaces the first
    assert cli.main(["demo", "--output", str(tmp_path), "--format", fmt, "--images", "7",
                     "--runner=FnApiRunner"]) == 0
    assert "verify: 7 examples parsed with TensorFlow: OK" in capsys.readouterr().out
  assert json.loads((tmp_path / "tfrecords" / "manifest.json").read_text())["format"] == fmt
  assert (tmp_path / cli.DEMO_MARKER).is_file()  # what lets the next run write here again


def _tree(root: Path) -> dict:
  return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
          for p in sorted(root.rglob("*"))}


def test_demo_refuses_a_folder_it_did_not_make(tmp_path, capsys):
  """A user's DIR/data (their own COCO file, CSV, VOC and images): exit 2, one line, every
  byte as it was, nothing added."""
  data = tmp_path / "mine" / "data"
  (data / "voc" / "Annotations").mkdir(parents=True)
  (data / "images").mkdir()
  (data / "instances_train.json").write_text('{"images": []}')
  (data / "train_labels.csv").write_text("filename,class\n")
  (data / "voc" / "Annotations" / "a.xml").write_text("<annotation/>")
  (data / "images" / "a.jpg").write_bytes(b"\xff\xd8 not the demo's")
  before = _tree(tmp_path / "mine")
  assert cli.main(["demo", "--output", str(tmp_path / "mine")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("beam-tfrecord: error: demo --output ")
  assert "did not write (data)" in err
  assert _tree(tmp_path / "mine") == before


def _demo_data(tmp_path: Path) -> Path:
  """A folder as the demo leaves it before converting: claimed, data/ made and listed."""
  from beam_tfrecord.cli import demo
  folder = tmp_path / "demo"
  demo.claim_demo_folder(str(folder))
  demo.make_data(str(folder), 3)
  return folder


@pytest.mark.parametrize("change, words", [
    (lambda d: (d / "instances_train.json").write_text('{"images": []}'),
     "holds data/instances_train.json, changed since the demo wrote it"),
    (lambda d: (d / "images" / "mine.jpg").write_bytes(b"\xff\xd8 a photo of mine"),
     "holds data/images/mine.jpg, which the demo did not write"),
    (lambda d: (d / "mine").mkdir(), "holds data/mine, which the demo did not write"),
    (lambda d: os.symlink(d.parent.parent / "elsewhere", d / "images" / "elsewhere"),
     "holds data/images/elsewhere, which the demo did not write"),
    (lambda d: (d / "train_labels.csv").unlink() or os.symlink(
        d / "val_labels.csv", d / "train_labels.csv"),
     "holds data/train_labels.csv, changed since the demo wrote it"),
])
def test_demo_replaces_only_the_data_it_wrote(tmp_path, capsys, change, words):
  """The marker lists what the demo wrote under data/ (name, size, SHA-256): anything else
  there is the user's, and the demo stops with one line, exit 2, every byte as it was."""
  folder = _demo_data(tmp_path)
  change(folder / "data")
  before = _tree(folder)
  assert cli.main(["demo", "--output", str(folder)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and words in err, err
  assert _tree(folder) == before


def test_demo_data_checks_that_pass(tmp_path):
  from beam_tfrecord.cli import demo
  folder = _demo_data(tmp_path)
  listed = json.loads((folder / cli.DEMO_MARKER).read_text())["data"]
  assert listed["images"] is None and len(listed["instances_train.json"][1]) == 64
  (folder / "data" / "val_labels.csv").unlink()  # a file of the demo's removed: still its own
  leftover = folder / demo.DEMO_STAGING  # a run killed while making the next data/
  (leftover / "images").mkdir(parents=True)
  (leftover / "images" / "half.jpg").write_bytes(b"\xff")
  demo.claim_demo_folder(str(folder))
  assert not leftover.exists() and (folder / "data" / "train_labels.csv").is_file()
  demo.make_data(str(folder), 2)  # replaced, listed anew
  assert sorted(p.name for p in (folder / "data" / "images").iterdir()) == sorted(
      n.split("/")[1] for n in json.loads((folder / cli.DEMO_MARKER).read_text())["data"]
      if n.startswith("images/"))
  demo.claim_demo_folder(str(folder))


def test_demo_refuses_data_under_an_earlier_marker(tmp_path, capsys):
  """An earlier demo's marker (a sentence, no listing): data/ cannot be told from the user's."""
  folder = tmp_path / "old"
  (folder / "data").mkdir(parents=True)
  (folder / cli.DEMO_MARKER).write_text("made by `beam-tfrecord demo`\n")
  (folder / "data" / "instances_train.json").write_text("{}")
  before = _tree(folder)
  assert cli.main(["demo", "--output", str(folder)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "kept no list of its files" in err
  assert _tree(folder) == before
  (folder / "data" / "instances_train.json").unlink()  # an empty data/: nothing to lose
  from beam_tfrecord.cli import demo
  demo.claim_demo_folder(str(folder))


@pytest.mark.parametrize("command", ["convert", "demo"])
def test_misspelt_runner_is_one_line(command, tmp_path, capsys):
  out = tmp_path / "out"
  args = (["convert", "--format", "coco", "--input", str(tmp_path / "a.json")]
          if command == "convert" else ["demo"])
  assert cli.main([*args, "--output", str(out), "--runner=DirectRuner"]) == 2
  assert capsys.readouterr().err == (
      "beam-tfrecord: error: unknown --runner DirectRuner: did you mean DirectRunner?\n")
  assert not out.exists()


def test_check_runner():
  for name in ("DirectRunner", "directrunner", "Direct", "FnApiRunner", "dataflow",
               "my.module.Runner", None):
    cli.check_runner(name)  # as Beam matches them (dotted names are Beam's to load)
  with pytest.raises(cli.UsageError, match="Beam knows BundleBasedDirectRunner, "):
    cli.check_runner("Spaceship")


def test_demo_folder_rules(tmp_path):
  new = tmp_path / "new"
  cli.claim_demo_folder(str(new))  # made here: marked
  assert [p.name for p in new.iterdir()] == [cli.DEMO_MARKER]
  cli.claim_demo_folder(str(new))  # its own: again
  (new / "data").mkdir()
  (new / "show.png").write_bytes(b"png")
  cli.claim_demo_folder(str(new))
  empty = tmp_path / "empty"
  empty.mkdir()
  cli.claim_demo_folder(str(empty))  # nothing in it to overwrite
  assert (empty / cli.DEMO_MARKER).is_file()
  (new / "notes.txt").write_text("mine")  # the demo's folder, with a file of the user's
  with pytest.raises(cli.UsageError, match="holds notes.txt besides the demo's own"):
    cli.claim_demo_folder(str(new))
  linked = tmp_path / "linked"
  linked.mkdir()
  (linked / cli.DEMO_MARKER).write_text("")
  os.symlink(str(tmp_path / "new"), str(linked / "data"))  # would write through the link
  with pytest.raises(cli.UsageError, match="holds data besides"):
    cli.claim_demo_folder(str(linked))
  (tmp_path / "file").write_text("x")
  with pytest.raises(cli.UsageError, match="is not a folder"):
    cli.claim_demo_folder(str(tmp_path / "file"))
  assert (tmp_path / "file").read_text() == "x" and (new / "notes.txt").read_text() == "mine"


@pytest.mark.e2e
def test_inspect_and_verify(readme_demo, tmp_path, capsys):
  cwd, _, _ = readme_demo
  out = tmp_path / "copy"
  shutil.copytree(cwd / "demo-output" / "tfrecords", out)
  manifest = json.loads((out / "manifest.json").read_text())
  assert cli.main(["inspect", str(out)]) == 0
  text = capsys.readouterr().out
  for split, entry in manifest["splits"].items():
    assert re.search(rf"^\s+{split}\s+{entry['examples']}\s+{entry['objects']}\s+"
                     rf"{entry['num_shards']}\s", text, flags=re.M), text
  assert cli.main(["verify", str(out)]) == 0
  # a manifest that disagrees with the shards fails verification
  manifest["splits"]["train"]["examples"] += 1
  (out / "manifest.json").write_text(json.dumps(manifest))
  assert cli.main(["verify", str(out)]) != 0
  text = capsys.readouterr().out
  assert "FAILED" in text and "train: manifest says" in text

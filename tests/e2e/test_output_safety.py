"""Never destroy, never mix, never pretend (issue 8).

Every case here was a reproduced failure of the first version: --overwrite deleting files the
tool never wrote, a mistyped input replacing a good output with an empty one that said ok, two
runs mixing in one folder, fatal problems exiting 0, unknown options ignored, verify passing
on tampered outputs, kills leaving a mix. Each test runs the real CLI on generated images and
checks the output directory byte for byte, and with `verify` (TensorFlow).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import bad_data as bd
import pytest
from conftest import subprocess_env
from test_atomic_output import \
    listing as tree  # {relative path: bytes, dirs: None}
from test_atomic_output import make_coco

from beam_tfrecord import cli
from beam_tfrecord.finalize import lock
from beam_tfrecord.finalize import output as outputs

IMAGES_A, IMAGES_B = 8, 5


def args(ds: dict, output: str, *extra: str) -> list:
  return ["convert", "--format", "coco", "--input", ds["json"], "--images", ds["images"],
          "--output", output, "--num-shards", "2", bd.RUNNER, *extra]


def published(root: str) -> dict:
  """The output proper: what a reader sees, without the tool's own hidden entries."""
  return {k: v for k, v in tree(root).items() if not k.startswith(outputs.OWN_PREFIX)}


def run(argv, capsys=None):
  code = cli.main(list(argv))
  err = capsys.readouterr().err if capsys is not None else ""
  return code, err


def one_line(err: str) -> str:
  lines = [l for l in err.strip().splitlines() if l.strip()]
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("safety")
  a = make_coco(str(root / "a"), IMAGES_A, "a")
  b = make_coco(str(root / "b"), IMAGES_B, "b")
  good = str(root / "good")
  assert cli.main(args(a, good)) == 0
  return {"a": a, "b": b, "good": good, "good_tree": tree(good), "root": root}


@pytest.fixture
def good_copy(data, tmp_path):
  """A copy of a finished, verified output of dataset A."""
  out = str(tmp_path / "out")
  shutil.copytree(data["good"], out)
  return out


def assert_is_a(out: str, data) -> None:
  assert published(out) == published(data["good"])
  assert cli.main(["verify", out]) == 0


# --- ownership -------------------------------------------------------------------------------

def test_foreign_files_are_refused_and_nothing_is_deleted(data, good_copy, capsys):
  with open(os.path.join(good_copy, "mine.tfrecord"), "wb") as f:
    f.write(b"user data")
  os.makedirs(os.path.join(good_copy, ".tmp-backup"))
  before = tree(good_copy)
  code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
  assert code == 2
  line = one_line(err)
  assert "did not write" in line and "mine.tfrecord" in line and ".tmp-backup" in line
  assert tree(good_copy) == before


@pytest.mark.parametrize("mode", ["--overwrite", "--if-changed"])
@pytest.mark.parametrize("entry", ["/abs", "../x", "a/b", "", "."])
def test_a_manifest_listing_files_outside_the_output_deletes_nothing(data, good_copy, tmp_path,
                                                                   capsys, mode, entry):
  """A reproduced failure: --overwrite and --if-changed deleted what the previous manifest's
  'files' listed, joined to the output: an absolute or '../' entry deleted a file outside it
  ('' and '.' the output itself). Anyone can edit manifest.json: exit 2, nothing deleted."""
  victim = tmp_path / "x"  # good_copy is tmp_path/out: '../x' is this file
  victim.write_bytes(b"not the tool's")
  path = os.path.join(good_copy, outputs.MANIFEST)
  with open(path) as f:
    manifest = json.load(f)
  manifest["files"].append(str(victim) if entry == "/abs" else entry)
  with open(path, "w") as f:
    json.dump(manifest, f)
  before = tree(str(tmp_path))
  code, err = run(args(data["b"], good_copy, mode), capsys)
  assert code == 2
  assert "plain names" in one_line(err) and "Nothing was deleted" in err
  assert tree(str(tmp_path)) == before  # the outside file and the whole output as they were


def _as_unprivileged(argv):
  """argv run so that file permissions apply: root ignores them unless it drops
  CAP_DAC_OVERRIDE (setpriv); None when that is not possible here."""
  if os.geteuid() != 0:
    return argv
  if not shutil.which("setpriv"):
    return None
  caps = "-dac_override,-dac_read_search"
  return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *argv]


@pytest.mark.parametrize("command", ["convert", "demo"])
def test_a_read_only_place_for_the_output_is_one_line_not_a_traceback(data, tmp_path,
                                                                        command):
  """A reproduced failure: an output that cannot be created (read-only parent or file
  system) ended in a PermissionError traceback."""
  parent = tmp_path / "read-only"
  parent.mkdir()
  out = parent / "out"
  argv = (["convert", "--format", "coco", "--input", data["a"]["json"], "--images",
           data["a"]["images"], "--output", str(out), bd.RUNNER] if command == "convert" else
          ["demo", "--output", str(out), "--images", "3"])
  argv = _as_unprivileged([sys.executable, "-m", "beam_tfrecord.cli", *argv])
  if argv is None:
    pytest.skip("running as root without setpriv: permissions would not apply")
  os.chmod(parent, 0o555)
  try:
    proc = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(),
                          timeout=300)
  finally:
    os.chmod(parent, 0o755)
  assert proc.returncode == 1, proc.stderr
  assert "Permission denied" in one_line(proc.stderr) and str(out) in proc.stderr
  assert os.listdir(parent) == []


def test_label_map_input_inside_the_output_is_never_deleted(data, good_copy, capsys):
  label_map = os.path.join(good_copy, "label_map.pbtxt")
  before = tree(good_copy)
  code, err = run(args(data["a"], good_copy, "--overwrite", "--label-map", label_map), capsys)
  assert code == 2
  assert "label_map.pbtxt" in one_line(err) and "move it out" in err
  assert tree(good_copy) == before


def test_inputs_inside_the_output_survive_overwrite(tmp_path, capsys):
  out = str(tmp_path / "out")
  ds = make_coco(os.path.join(out, "data"), 4, "in")  # annotations and images inside OUT
  inputs = tree(os.path.join(out, "data"))
  assert cli.main(args(ds, out)) == 0
  assert cli.main(args(ds, out, "--overwrite", "--num-shards", "1")) == 0
  assert tree(os.path.join(out, "data")) == inputs
  assert cli.main(["verify", out]) == 0
  manifest = outputs.read_manifest(out)
  assert manifest["splits"]["train"]["num_shards"] == 1
  assert "data" not in manifest["files"]



def _listed(out: str, which: str) -> str:
  """The name under which the output's manifest lists `which` (a shard, the errors file...)."""
  manifest = outputs.read_manifest(out)
  name = {"shard": lambda: manifest["splits"]["train"]["shards"][0]["path"],
          "errors": lambda: manifest["errors"]["files"][0]}.get(which, lambda: which)()
  assert name in manifest["files"], (name, manifest["files"])
  return name


@pytest.mark.parametrize("target", ["directory", "file"])
@pytest.mark.parametrize("which", ["shard", "label_map.pbtxt", "README.md", "errors",
                                   "manifest.json"])
def test_a_listed_file_replaced_by_a_link_is_refused_before_running(data, good_copy, tmp_path,
                                                                   capsys, which, target):
  """Issue 40, item 6: a file the manifest lists, replaced by a symlink to a directory, gave
  Beam's 15-line traceback and exit 1 after the whole pipeline, and verify said OK. Refused
  before running (exit 2, one line naming it), what the link leads to is untouched, and
  verify names it without reading through it."""
  name = _listed(good_copy, which)
  elsewhere = tmp_path / "elsewhere"
  if target == "directory":
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
  else:
    elsewhere.write_text("keep me")
  os.remove(os.path.join(good_copy, name))
  os.symlink(elsewhere, os.path.join(good_copy, name))
  before, outside = tree(good_copy), tree(str(tmp_path))
  code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
  assert code == 2, err
  line = one_line(err)
  assert name in line and f"a symbolic link to a {target}" in line and "Nothing was deleted" \
      in line, line
  assert tree(good_copy) == before  # no run directory: the pipeline never ran
  assert tree(str(tmp_path)) == outside
  capsys.readouterr()
  assert cli.main(["verify", good_copy]) == 1
  out = capsys.readouterr().out
  assert f"{name}: a symbolic link to a {target}, not " in out and out.strip().endswith(
      "FAILED"), out
  assert "Traceback" not in out


# A hand-edited journal whose run directory is a link to another folder, one naming a path,
# one that is no JSON, one that is a link: no repair completes them (issue 30, items 1, 7).
FORGED_JOURNALS = {
    "run_dir_link": {"run_id": "x", "run_dir": ".beam-tfrecord-run-evil",
                     "files": ["manifest.json"], "old_files": ["README.md"]},
    "path_in_files": {"run_id": "x", "run_dir": ".beam-tfrecord-run-evil",
                      "files": ["../x"], "old_files": []},
    "not_json": "{run_id",
    "journal_link": None,
}


@pytest.mark.parametrize("forgery", sorted(FORGED_JOURNALS))
def test_a_forged_swap_journal_names_the_file_to_remove(data, good_copy, tmp_path, capsys,
                                                        forgery):
  """Issue 40, item 7: inspect sent users to `verify --repair`, which refused the journal
  ("is a link or not a directory"), and neither said what to do next. Every command names
  the journal to remove, by its full path; once it is removed the output verifies."""
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (elsewhere / "manifest.json").write_text("{}")
  journal = os.path.join(good_copy, outputs.JOURNAL)
  forged = FORGED_JOURNALS[forgery]
  if forgery == "run_dir_link":
    os.symlink(elsewhere, os.path.join(good_copy, forged["run_dir"]))
  if forgery == "journal_link":
    os.symlink(elsewhere / "manifest.json", journal)
  else:
    with open(journal, "w") as f:
      f.write(forged if isinstance(forged, str) else json.dumps(forged))
  before, outside = published(good_copy), tree(str(elsewhere))
  remove = f"remove {journal}, then run `beam-tfrecord verify {good_copy}`"
  for argv in (["inspect", good_copy], ["show", good_copy, "--output",
                                        str(tmp_path / "grid.png")],
               ["verify", "--repair", good_copy], args(data["b"], good_copy, "--overwrite")):
    code, err = run(argv, capsys)
    assert code == 2 and remove in one_line(err), (argv, err)
  assert cli.main(["verify", good_copy]) == 1
  out = capsys.readouterr().out
  assert remove in out and out.strip().endswith("FAILED"), out
  assert published(good_copy) == before and tree(str(elsewhere)) == outside
  os.remove(journal)  # as told
  assert_is_a(good_copy, data)


def test_an_input_inside_the_output_survives_a_listed_name_that_globs(data, good_copy,
                                                                     capsys):
  """A manifest listing '*' (a plain name) next to a file of that name: --overwrite deleted
  the old files through Beam's delete, which reads a name as a glob, and so removed the label
  map given as an input inside the output too. Each old file is now one unlink."""
  label_map = os.path.join(good_copy, "labels.pbtxt")
  shutil.copy(os.path.join(good_copy, "label_map.pbtxt"), label_map)
  with open(os.path.join(good_copy, "*"), "wb") as f:
    f.write(b"listed")
  _edit_manifest(good_copy, lambda m: m["files"].append("*"))
  code, err = run(args(data["b"], good_copy, "--overwrite", "--label-map", label_map), capsys)
  assert code == 0, err
  assert os.path.exists(label_map) and not os.path.exists(os.path.join(good_copy, "*"))
  assert cli.main(["verify", good_copy]) == 0


# --- replace, don't destroy ----------------------------------------------------------------

def test_a_mistyped_input_leaves_the_output_alone(data, good_copy, capsys):
  code, err = run(["convert", "--format", "coco", "--input", data["a"]["json"] + "x",
                   "--images", data["a"]["images"], "--output", good_copy, "--overwrite",
                   bd.RUNNER], capsys)
  assert code == 2 and "no such file" in one_line(err)
  assert_is_a(good_copy, data)


def test_an_empty_run_exits_4_and_leaves_the_output_alone(data, good_copy, tmp_path, capsys):
  wrong = tmp_path / "wrong-images"
  wrong.mkdir()
  code, err = run(["convert", "--format", "coco", "--input", data["b"]["json"], "--images",
                   str(wrong), "--output", good_copy, "--overwrite", bd.RUNNER], capsys)
  assert code == 4
  assert "nothing was written" in err and "unchanged" in err
  assert_is_a(good_copy, data)
  [report] = [n for n in os.listdir(good_copy) if n.startswith(outputs.RUN_PREFIX)]
  manifest = outputs.read_json(os.path.join(good_copy, report, "manifest.json"))
  assert manifest["outcome"] == "empty" and manifest["errors"]["by_reason"] == {
      "missing_image": IMAGES_B}


def test_a_failed_run_exits_3_and_leaves_the_output_alone(data, tmp_path, good_copy, capsys):
  bad = make_coco(str(tmp_path / "bad"), 3, "bad", missing=True)
  code, err = run(args(bad, good_copy, "--overwrite", "--strict"), capsys)
  assert code == 3 and "error rate" in err
  assert_is_a(good_copy, data)


def test_a_first_run_with_nothing_found_leaves_no_directory(tmp_path, capsys):
  doc = tmp_path / "none.json"  # cut short inside its first image: a file-level error
  doc.write_text('{"images": [{"id": 1, "file_na')
  out = tmp_path / "out"
  code, err = run(["convert", "--format", "coco", "--input", str(doc), "--output", str(out),
                   bd.RUNNER], capsys)
  assert code == 2 and "no images found" in err
  assert not out.exists()


def test_if_changed_with_a_missing_source_keeps_the_output(data, good_copy, capsys):
  code, err = run(["convert", "--format", "coco", "--input", data["a"]["json"] + ".gone",
                   "--images", data["a"]["images"], "--output", good_copy, "--if-changed",
                   bd.RUNNER], capsys)
  assert code == 2
  assert_is_a(good_copy, data)


def test_overwrite_replaces_only_after_success(data, good_copy):
  assert cli.main(args(data["b"], good_copy, "--overwrite")) == 0
  manifest = outputs.read_manifest(good_copy)
  assert manifest["totals"]["examples"] == IMAGES_B
  assert sorted(published(good_copy)) == sorted(manifest["files"])
  assert cli.main(["verify", good_copy]) == 0


# --- one writer at a time ------------------------------------------------------------------

def test_two_concurrent_runs_one_wins_the_other_exits_2(data, tmp_path):
  out = str(tmp_path / "out")
  procs = [subprocess.Popen([sys.executable, "-m", "beam_tfrecord.cli",
                             *args(data[k], out)], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for k in ("a", "b")]
  results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
  assert sorted(code for code, _ in results) == [0, 2], results
  [loser] = [err for code, err in results if code == 2]
  assert "locked by" in loser or "holds an earlier run" in loser, loser
  manifest = outputs.read_manifest(out)
  assert sorted(published(out)) == sorted(manifest["files"])  # one run's files, no mix
  assert cli.main(["verify", out]) == 0


def test_a_live_lock_is_reported_and_not_broken(data, good_copy, capsys):
  with lock.OutputLock(good_copy, "someone-else"):
    code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
    assert code == 2 and "locked by run someone-else" in one_line(err)
    code, err = run(args(data["b"], good_copy, "--overwrite", "--break-lock"), capsys)
    assert code == 2 and "still running" in one_line(err)
  assert_is_a(good_copy, data)


def _dead_pid() -> int:
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def test_a_dead_runs_lock_is_taken_over_with_one_line(data, good_copy, capsys):
  import socket
  pid = _dead_pid()
  with open(os.path.join(good_copy, outputs.LOCK), "w") as f:
    json.dump({"host": socket.gethostname(), "pid": pid, "run_id": "dead",
               "started": "2026-01-01T00:00:00+00:00"}, f)
  code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
  took = [line for line in err.splitlines() if "took over" in line]
  assert code == 0 and len(took) == 1 and f"pid {pid}" in took[0], err
  assert "Traceback" not in err
  assert not os.path.exists(os.path.join(good_copy, outputs.LOCK))
  assert outputs.read_manifest(good_copy)["totals"]["examples"] == IMAGES_B


# --- honest exit codes -----------------------------------------------------------------------

@pytest.mark.parametrize("option,suggestion", [
    (["--num_shards", "4"], "--num-shards"), (["--label_map", "x"], "--label-map"),
    (["--strcit"], "--strict")])
def test_unknown_options_are_refused_with_a_suggestion(data, tmp_path, capsys, option,
                                                       suggestion):
  out = tmp_path / "out"
  code, err = run(["convert", "--format", "coco", "--input", data["a"]["json"],
                   "--images", data["a"]["images"], "--output", str(out), *option], capsys)
  assert code == 2
  line = one_line(err)
  assert option[0] in line and f"did you mean {suggestion}?" in line
  assert not out.exists()


def test_beam_options_still_pass_through(data, tmp_path):
  out = str(tmp_path / "out")
  assert cli.main(["convert", "--format", "coco", "--input", data["a"]["json"], "--images",
                   data["a"]["images"], "--output", out, "--runner=DirectRunner",
                   "--direct_num_workers=1", "--direct_running_mode=in_memory"]) == 0


@pytest.mark.parametrize("case", ["label_map_syntax", "label_map_missing", "voc_two_inputs",
                                  "coco_directory", "voc_missing", "voc_split_prefix"])
def test_user_mistakes_exit_2_before_any_output(data, tmp_path, capsys, case):
  out = tmp_path / "out"
  bad_map = tmp_path / "map.pbtxt"
  bad_map.write_text("item { name: 'cat' id: 1 ")
  base = ["convert", "--output", str(out), bd.RUNNER]
  argv = {
      "label_map_syntax": ["--format", "coco", "--input", data["a"]["json"], "--label-map",
                           str(bad_map)],
      "label_map_missing": ["--format", "coco", "--input", data["a"]["json"], "--label-map",
                            str(tmp_path / "nope.pbtxt")],
      "voc_two_inputs": ["--format", "voc", "--input", str(tmp_path), "--input",
                         str(tmp_path)],
      "coco_directory": ["--format", "coco", "--input", str(tmp_path)],
      "voc_missing": ["--format", "voc", "--input", str(tmp_path / "VOC2012")],
      "voc_split_prefix": ["--format", "voc", "--input", f"train={tmp_path}"],
  }[case]
  code, err = run(base + argv, capsys)
  assert code == 2
  one_line(err)
  assert not out.exists()


def test_a_runner_failure_exits_1_in_one_line(data, good_copy, capsys, monkeypatch):
  import apache_beam as beam

  def explode(self, *a, **k):
    raise RuntimeError("worker lost\nwith a long story")
  monkeypatch.setattr(beam.Pipeline, "run", explode)
  code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
  assert code == 1 and "worker lost" in one_line(err) and "unchanged" in err
  monkeypatch.undo()
  assert_is_a(good_copy, data)


# --- key identity, limits --------------------------------------------------------------------

def test_a_file_over_max_image_bytes_is_rejected_from_a_stat(tmp_path):
  ds = make_coco(str(tmp_path / "big"), 2, "big")
  huge = os.path.join(ds["images"], "big_01.jpg")
  with open(huge, "r+b") as f:  # sparse: 1.5 GB on paper, nothing allocated
    f.truncate(1_500_000_000)
  out = str(tmp_path / "out")
  run_ = bd.convert(args(ds, out)[1:])
  assert run_.code == 0 and [e["filename"] for e in run_.examples] == ["big_00.jpg"]
  [error] = run_.errors
  assert (error["reason"], error["stage"], error["level"]) == ("image_too_large", "read",
                                                                "image")
  assert "1500000000 bytes" in error["message"]
  small = bd.convert(args(ds, str(tmp_path / "out2"), "--max-image-bytes", "100")[1:])
  assert small.code == 4 and {e["reason"] for e in small.errors} == {"image_too_large"}




# --- verify checks the manifest --------------------------------------------------------------

def _edit_manifest(out: str, change) -> None:
  path = os.path.join(out, "manifest.json")
  manifest = outputs.read_json(path)
  change(manifest)
  with open(path, "w") as f:
    json.dump(manifest, f)


def _first_shard(out: str) -> str:
  return outputs.read_manifest(out)["splits"]["train"]["shards"][0]["path"]


@pytest.mark.parametrize("tamper,says", [
    ("status", "status is 'failed: by hand', not 'ok'"),
    ("stray", "train-00009-of-00010.tfrecord: stray record file, not in the manifest"),
    ("bytes", "manifest says 1 bytes"),
    ("records", "manifest says 99 records"),
    ("label_map", "label_map.pbtxt: differs from the manifest's label map"),
    ("crc", "corrupt record 1 (CRC mismatch)"),
    ("missing", "listed in the manifest, missing"),
    # a shard written outside the output (a template's fill once put val's at the root):
    # verify said OK with those examples missing
    ("shard_outside", "'/train-0.tfrecord': a shard of split train the manifest's files omit"),
    ("files_outside", "does not list its files as plain names inside the output"),
])
def test_verify_reports_each_tampering_in_one_line(good_copy, capsys, tamper, says):
  first = _first_shard(good_copy)
  if tamper == "status":
    _edit_manifest(good_copy, lambda m: m.update(status="failed: by hand"))
  elif tamper == "stray":
    shutil.copy(os.path.join(good_copy, first),
                os.path.join(good_copy, "train-00009-of-00010.tfrecord"))
  elif tamper == "bytes":
    _edit_manifest(good_copy, lambda m: m["splits"]["train"]["shards"][0].update(bytes=1))
  elif tamper == "records":
    _edit_manifest(good_copy, lambda m: m["splits"]["train"]["shards"][0].update(examples=99))
  elif tamper == "label_map":
    with open(os.path.join(good_copy, "label_map.pbtxt"), "a") as f:
      f.write('item { name: "bird" id: 7 }\n')
  elif tamper == "crc":
    from apache_beam.io.tfrecordio import _TFRecordUtil
    path = os.path.join(good_copy, first)
    with open(path, "rb") as f:
      length = len(_TFRecordUtil.read_record(f))
    offset = 12 + length + 4 + 12 + 100  # inside the second record's data
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0xFF
    open(path, "wb").write(bytes(data))
  elif tamper == "missing":
    os.remove(os.path.join(good_copy, first))
  elif tamper == "shard_outside":
    os.remove(os.path.join(good_copy, first))
    _edit_manifest(good_copy, lambda m: (
        m["splits"]["train"]["shards"][0].update(path="/train-0.tfrecord"),
        m["files"].remove(first)))
  elif tamper == "files_outside":
    _edit_manifest(good_copy, lambda m: m["files"].append("../x"))
  assert cli.main(["verify", good_copy]) == 1
  out = capsys.readouterr().out
  assert says in out, out
  assert "Traceback" not in out and out.strip().endswith("FAILED")


def test_verify_reports_a_shard_tensorflow_cannot_read_in_one_line(tmp_path):
  """Any other TensorFlow error reading a shard (an unreachable gs:// host: "Could not resolve
  host", FailedPreconditionError) ended verify with a traceback; it is one problem line. Shown
  with a directory where TensorFlow expects the file (locally, verify's own check sees that
  first, before TensorFlow)."""
  import tensorflow as tf
  from beam_tfrecord.readback import verify
  count, problems = verify._check_shard(str(tmp_path), "train-0.tfrecord",
                                        {"a": tf.io.FixedLenFeature([], tf.int64)}, 3)
  assert count == 0 and len(problems) == 1, problems
  assert problems[0].startswith("train-0.tfrecord: cannot be read with TensorFlow after "
                                "record 0 (")
  assert "Is a directory" in problems[0] and "{{" not in problems[0] and "[Op:" not in problems[0]


def test_inspect_shows_the_status_first(good_copy, capsys):
  assert cli.main(["inspect", good_copy]) == 0
  assert capsys.readouterr().out.startswith("status: ok\n")


# --- kills -----------------------------------------------------------------------------------

def test_a_killed_writer_process_fails_the_run_and_keeps_the_old_output(data, good_copy):
  """The OOM killer's case: one shard writer process dies (SIGKILL) while the run goes on.
  The run fails (exit 1, one line) and the earlier output stays as it was."""
  proc = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli",
                         *args(data["b"], good_copy, "--overwrite", "--writer-processes", "2")],
                        env=subprocess_env(BEAM_TFRECORD_KILL_AT="shard"),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]  # after Beam's own log of the failed bundle
  assert last.startswith("beam-tfrecord: the pipeline failed") and "shard writer process died" \
      in last and last.endswith("is unchanged"), last
  assert_is_a(good_copy, data)


KILL_POINTS = ["parse", "write", "finalize", "swap-journal", "swap-old-manifest",
               "swap-old-files", "swap-move", "swap-manifest"]


@pytest.fixture(scope="module")
def clean_b(data):
  out = str(data["root"] / "clean_b")
  assert cli.main(args(data["b"], out)) == 0
  return published(out)


@pytest.fixture(scope="module")
def killed(data, tmp_path_factory):
  """killed(point, target): at target, the state a `convert --overwrite` of B left in a copy
  of the good output when it was killed (SIGKILL) at point. Each point is killed once per
  module (a real process, the run's own BEAM_TFRECORD_KILL_AT), in a directory of its own
  that no test changes; every test gets a copy of it (links copied as links; the swap
  journal names the run directory by its plain name, so the copy is the same state).
  Returns the temporary directories the killed process left."""
  import glob
  import tempfile
  states = {}

  def get(point: str, target: str) -> list:
    if point not in states:
      where = str(tmp_path_factory.mktemp(f"killed-{point}") / "out")
      shutil.copytree(data["good"], where)
      proc = subprocess.Popen([sys.executable, "-m", "beam_tfrecord.cli",
                               *args(data["b"], where, "--overwrite")],
                              env=subprocess_env(BEAM_TFRECORD_KILL_AT=point),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      _, stderr = proc.communicate(timeout=300)
      leftovers = glob.glob(os.path.join(tempfile.gettempdir(),
                                         f"beam-tfrecord-tmp-{proc.pid}-*"))
      states[point] = (where, proc.returncode, stderr, leftovers)
    where, code, stderr, leftovers = states[point]
    assert code == -9, stderr[-2000:]
    shutil.copytree(where, target, symlinks=True)
    return leftovers
  return get


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_kill_leaves_the_old_output_or_the_new_one_never_a_mix(data, clean_b, killed,
                                                                  tmp_path, capsys, point):
  good_copy = str(tmp_path / "out")
  leftovers = killed(point, good_copy)
  capsys.readouterr()
  if point.startswith("swap-"):
    # killed while replacing: detected, and repaired to the new output
    assert cli.main(["verify", good_copy]) == 1
    assert "interrupted while replacing" in capsys.readouterr().out
    if point in ("swap-old-manifest", "swap-old-files", "swap-move"):
      with pytest.raises(outputs.IncompleteOutput):  # no manifest: readers see no output
        outputs.read_manifest(good_copy)
    else:  # a complete manifest: the old output (journal written) or the new (moved in)
      manifest = outputs.read_manifest(good_copy)
      assert sorted(published(good_copy)) == sorted(manifest["files"])
    assert cli.main(["verify", "--repair", good_copy]) == 0
    # the repair held the output's lock: the killed run's, taken over and released
    assert "took over the lock" in one_line(capsys.readouterr().err)
    assert not os.path.exists(os.path.join(good_copy, outputs.LOCK))
    now = published(good_copy)
    # the card names its own directory and run: it belongs to the run the manifest describes
    card = now.pop("README.md").decode("utf-8")
    assert outputs.read_manifest(good_copy)["created"] in card
    assert now.pop("manifest.json") and now == {k: v for k, v in clean_b.items()
                                                 if k not in ("manifest.json", "README.md")}
  else:
    assert_is_a(good_copy, data)
  # the dead run's lock (if verify --repair did not take it over) is taken over by the next
  # run, which cleans up after it
  capsys.readouterr()
  code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
  assert code == 0 and ("took over" in err) == (not point.startswith("swap-")), err
  assert [n for n in os.listdir(good_copy) if n.startswith(outputs.OWN_PREFIX)] == []
  assert not [p for p in leftovers if os.path.exists(p)], "the dead run's temp dir is left"
  assert cli.main(["verify", good_copy]) == 0


@pytest.mark.parametrize("point", ["swap-old-manifest", "swap-old-files", "swap-move"])
def test_the_next_convert_completes_a_killed_swap(data, clean_b, killed, tmp_path, capsys,
                                                  point):
  """Killed while replacing (no manifest in the output, the new files half moved in): the
  next convert rolls the swap forward under the lock, then runs, instead of calling the
  tool's own files foreign (issue 30, item 3)."""
  good_copy = str(tmp_path / "out")
  killed(point, good_copy)  # the kill test_a_kill_leaves_... repairs with verify instead
  capsys.readouterr()
  code, err = run(args(data["b"], good_copy, "--overwrite"), capsys)
  assert code == 0, err
  assert "completed the interrupted replacement" in err
  now = published(good_copy)
  now.pop("README.md"), now.pop("manifest.json")
  assert now == {k: v for k, v in clean_b.items() if k not in ("manifest.json", "README.md")}

"""The output directory: refused when not empty, replaced whole with --overwrite, never half
written (shards staged and renamed, manifest.json last), and retries leave no trace."""
from __future__ import annotations

import os
import re
import shutil

import bad_data as bd
import pytest

from beam_tfrecord import cli
from beam_tfrecord.plan import shard_plan
from beam_tfrecord.records import tfrecord

IMAGES = 8
SHARD_NAME = re.compile(r"^[A-Za-z0-9_.-]+-\d{5}-of-\d{5}\.tfrecord$")


def make_coco(root: str, count: int, tag: str, missing: bool = False) -> dict:
  """`count` JPEGs TAG_NN.jpg with one box each (cat, dog alternating) in ROOT/images and
  ROOT/TAG.json; with `missing`, one more image whose file does not exist."""
  images = os.path.join(root, "images")
  coco = bd.Coco(images, [(1, "cat"), (2, "dog")])
  for i in range(count):
    coco.image(i + 1, f"{tag}_{i:02d}.jpg", bd.jpeg((64 + i, 48), color=(20 * i, 90, 200)),
               64 + i, 48)
    coco.ann(i + 1, 1 + i % 2, [4, 4, 20, 16])
  if missing:
    coco.image(99, "missing.jpg", None, 64, 48)
  return {"json": coco.write(os.path.join(root, f"{tag}.json")), "images": images}


def make_dataset(root: str) -> dict:
  return make_coco(root, IMAGES, "img", missing=True)  # one error: errors-*.jsonl not empty


def args(ds: dict, output: str, *extra: str) -> list:
  return ["--format", "coco", "--input", ds["json"], "--images", ds["images"],
          "--output", output, *extra]


def listing(output: str) -> dict:
  """{relative path: bytes} of everything under output, hidden files and directories too."""
  result = {}
  for dirpath, dirnames, filenames in os.walk(output):
    for name in dirnames:
      result[os.path.relpath(os.path.join(dirpath, name), output) + "/"] = None
    for name in filenames:
      path = os.path.join(dirpath, name)
      with open(path, "rb") as f:
        result[os.path.relpath(path, output)] = f.read()
  return result


def shards(files: dict) -> dict:
  return {k: v for k, v in files.items() if k.endswith(".tfrecord")}


def assert_no_leftovers(output: str) -> None:
  """No temporary file or directory anywhere: the output holds only the run's own files."""
  for name in listing(output):
    base = os.path.basename(name.rstrip("/"))
    assert not base.startswith((".tmp", ".part")), f"left behind: {name}"
    assert "/" not in name, f"directory left in the output: {name}"


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
  return make_dataset(str(tmp_path_factory.mktemp("atomic_data")))


@pytest.fixture(scope="module")
def reshard(ds, tmp_path_factory):
  """Run with --num-shards 4, then again into the same directory with --num-shards 2."""
  output = str(tmp_path_factory.mktemp("reshard") / "out")
  first = bd.convert(args(ds, output, "--num-shards", "4"))
  first_files = listing(output)
  second = bd.convert(args(ds, output, "--num-shards", "2", "--overwrite"))
  return {"output": output, "first": first, "first_files": first_files, "second": second,
          "second_files": listing(output)}


def test_first_run_has_four_shards(reshard):
  assert reshard["first"].code == 0
  names = sorted(shards(reshard["first_files"]))
  assert names == [f"train-{i:05d}-of-00004.tfrecord" for i in range(4)]
  assert len(reshard["first"].examples) == IMAGES


def test_refuses_non_empty_output(ds, tmp_path, capsys):
  output = tmp_path / "out"
  output.mkdir()
  (output / "notes.txt").write_text("mine")
  code = cli.main(["convert", *args(ds, str(output)), bd.RUNNER])
  assert code == 2
  err = capsys.readouterr().err
  assert "did not write: notes.txt" in err and "Nothing was deleted" in err
  assert sorted(os.listdir(output)) == ["notes.txt"]
  assert (output / "notes.txt").read_text() == "mine"


def test_refuses_earlier_run_without_overwrite(ds, reshard, capsys):
  before = listing(reshard["output"])
  code = cli.main(["convert", *args(ds, reshard["output"], "--num-shards", "1"), bd.RUNNER])
  assert code == 2
  assert "--overwrite" in capsys.readouterr().err
  assert listing(reshard["output"]) == before  # nothing touched


def test_overwrite_removes_stale_shards(reshard):
  second = reshard["second"]
  assert second.code == 0
  names = sorted(shards(reshard["second_files"]))
  assert names == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
  assert not [n for n in reshard["second_files"] if "-of-00004" in n]
  assert [s["path"] for s in second.manifest["splits"]["train"]["shards"]] == names
  assert sorted(e["filename"] for e in second.examples) == sorted(
      e["filename"] for e in reshard["first"].examples)


def test_finished_runs_leave_no_temporary_files(reshard):
  for files in (reshard["first_files"], reshard["second_files"]):
    for name in files:
      base = os.path.basename(name.rstrip("/"))
      assert not base.startswith((".tmp", ".part")), name
      assert "/" not in name, f"directory left in the output: {name}"


def test_manifest_written_last(reshard):
  output = reshard["output"]
  manifest = os.stat(os.path.join(output, "manifest.json")).st_mtime_ns
  for name in os.listdir(output):
    assert os.stat(os.path.join(output, name)).st_mtime_ns <= manifest, name


# --------------------------------------------------------------------------------------------
# A transient failure inside the shard writer, retried by the runner

_INJECT = {"armed": False, "calls": 0, "fail_at": 0, "failures": 0, "always": False}
_REAL_FRAMING = tfrecord.framing


def _flaky_framing(value):
  """Stands in for tfrecord.framing (the shard file's, storage/record_files): raises at the fail_at-th record (once, or always),
  after the shard's earlier records went to its partial file."""
  _INJECT["calls"] += 1
  if _INJECT["armed"] and _INJECT["calls"] >= _INJECT["fail_at"]:
    if not _INJECT["always"]:
      _INJECT["armed"] = False
    _INJECT["failures"] += 1
    raise RuntimeError("injected failure while writing a shard")
  return _REAL_FRAMING(value)


def _arm(monkeypatch, fail_at: int, always: bool) -> None:
  _INJECT.update(armed=True, calls=0, fail_at=fail_at, failures=0, always=always)
  monkeypatch.setattr(tfrecord, "framing", _flaky_framing)


@pytest.fixture(scope="module")
def retried(ds, reshard, tmp_path_factory):
  """BundleBasedDirectRunner (retries a failed bundle up to 4 times), one injected failure in
  the middle of the second shard."""
  output = str(tmp_path_factory.mktemp("retried") / "out")
  with pytest.MonkeyPatch.context() as mp:
    _arm(mp, fail_at=IMAGES // 2 + 2, always=False)
    run = bd.convert(args(ds, output, "--num-shards", "2",
                          "--runner=BundleBasedDirectRunner"))
    inject = dict(_INJECT)
  return {"run": run, "inject": inject, "files": listing(output), "output": output}


def test_retry_happened(retried):
  assert retried["inject"]["failures"] == 1
  # records of the failed attempt were written again
  assert retried["inject"]["calls"] > IMAGES
  assert retried["run"].code == 0


def test_retried_output_is_byte_identical(retried, reshard):
  clean = reshard["second_files"]
  got = retried["files"]
  assert sorted(shards(got)) == sorted(shards(clean))
  for name in shards(clean):
    assert got[name] == clean[name], f"{name} differs from the clean run"
  assert got["label_map.pbtxt"] == clean["label_map.pbtxt"]
  errors = [n for n in got if n.startswith("errors-")]
  assert [got[n] for n in errors] == [clean[n] for n in errors if n in clean]


def test_retried_output_complete_without_duplicates(retried, reshard):
  run = retried["run"]
  names = [e["filename"] for e in run.examples]
  assert len(names) == len(set(names)) == IMAGES
  assert sorted(names) == sorted(e["filename"] for e in reshard["second"].examples)
  assert run.manifest["totals"] == reshard["second"].manifest["totals"]
  assert run.manifest["splits"] == reshard["second"].manifest["splits"]
  assert [e["reason"] for e in run.errors] == ["missing_image"]  # reported once, not twice
  assert run.manifest["errors"]["count"] == 1


def test_retried_run_leaves_no_temporary_files(retried):
  assert_no_leftovers(retried["output"])


# --------------------------------------------------------------------------------------------
# A run that dies (no retry): nothing that looks finished


def _final_outputs(names) -> list:
  return [n for n in names if SHARD_NAME.match(n) or n == "manifest.json"]


@pytest.fixture(scope="module")
def died_in_writer(ds, tmp_path_factory):
  output = str(tmp_path_factory.mktemp("died") / "out")
  with pytest.MonkeyPatch.context() as mp:
    _arm(mp, fail_at=IMAGES // 2 + 2, always=True)  # in this process: one writer, here
    run = bd.convert(args(ds, output, "--num-shards", "2", "--writer-processes", "1"))
  return {"output": output, "code": run.code, "files": listing(output)}


def test_died_in_writer_leaves_no_final_files(died_in_writer):
  assert died_in_writer["code"] == 1  # a runner failure
  top_level = [n for n in died_in_writer["files"] if "/" not in n]
  assert not _final_outputs(top_level), top_level
  assert "manifest.json" not in died_in_writer["files"]


def _copy_of(output: str, target: str) -> str:
  shutil.copytree(output, target, symlinks=True)
  return target


def test_dead_run_leftovers_are_removed_by_the_next_run(died_in_writer, ds, tmp_path):
  """What a dead run left is ours (.beam-tfrecord-run-*): the next run needs no --overwrite
  and leaves none of it behind."""
  output = _copy_of(died_in_writer["output"], str(tmp_path / "out"))
  assert os.listdir(output)
  run = bd.convert(args(ds, output, "--num-shards", "2"))
  assert run.code == 0 and len(run.examples) == IMAGES
  assert_no_leftovers(output)


@pytest.fixture(scope="module")
def overwritten_after_death(died_in_writer, ds, tmp_path_factory):
  output = _copy_of(died_in_writer["output"], str(tmp_path_factory.mktemp("revived") / "out"))
  run = bd.convert(args(ds, output, "--num-shards", "2", "--overwrite"))
  return {"run": run, "files": listing(output), "output": output}


def test_overwrite_after_death_gives_the_clean_output(overwritten_after_death, reshard):
  run, files = overwritten_after_death["run"], overwritten_after_death["files"]
  assert run.code == 0 and len(run.examples) == IMAGES
  assert sorted(shards({k: v for k, v in files.items() if "/" not in k})) == sorted(
      shards(reshard["second_files"]))
  for name, data in shards(reshard["second_files"]).items():
    assert files[name] == data
  assert not [n for n in files if os.path.basename(n).startswith(".part")]


def test_overwrite_after_death_leaves_no_directories(overwritten_after_death):
  assert_no_leftovers(overwritten_after_death["output"])


def test_died_in_finalize_leaves_no_manifest(ds, tmp_path, monkeypatch):
  """The manifest is the mark of a finished run: a run dying while writing it has none."""
  from apache_beam.io.filesystems import FileSystems
  real_create = FileSystems.create

  def create(path, *a, **kw):
    if "manifest" in os.path.basename(path):
      raise RuntimeError("injected failure in finalize")
    return real_create(path, *a, **kw)

  monkeypatch.setattr(FileSystems, "create", staticmethod(create))
  output = str(tmp_path / "out")
  assert bd.convert(args(ds, output, "--num-shards", "2")).code == 1
  assert "manifest.json" not in os.listdir(output)
  monkeypatch.undo()
  run = bd.convert(args(ds, output, "--num-shards", "2", "--overwrite"))
  assert run.code == 0 and len(run.examples) == IMAGES
  assert_no_leftovers(output)


def test_records_lost_by_the_runner_fail_the_run(ds, tmp_path, monkeypatch):
  """If fewer images reach the writer than were planned (Beam's multi_threading mode lost
  records under load in our benchmarks), the run must fail, not finish incomplete."""
  real = shard_plan.plan_split

  def one_more(*args, **kwargs):
    import dataclasses
    plan = real(*args, **kwargs)
    return dataclasses.replace(plan, count=plan.count + 1)  # as if one record vanished

  monkeypatch.setattr(shard_plan, "plan_split", one_more)
  output = str(tmp_path / "out")
  run = bd.convert(args(ds, output, "--num-shards", "2"))
  assert run.code == 1  # a runner failure
  assert run.manifest["status"].startswith("failed: the runner lost records")
  assert f"{IMAGES + 1} planned, {IMAGES} written or rejected" in run.manifest["status"]


# --------------------------------------------------------------------------------------------
# Writer processes


_SUBMITTED = []


def test_writer_processes_write_the_bytes_one_writer_writes(ds, reshard, tmp_path, monkeypatch):
  """Shards handed to writer processes (3 asked for, 2 shards: 2 start) come out byte for byte
  as written in the runner's own process, and read back alike."""
  from beam_tfrecord.write import shard_writer
  from beam_tfrecord.write import transform as sink

  class Spy(shard_writer.WriterPool):
    def submit(self, task):
      _SUBMITTED.append((task.split, task.shard, len(self._threads)))
      return super().submit(task)
  monkeypatch.setattr(sink, "WriterPool", Spy)
  one = reshard["second_files"]  # --num-shards 2, written in this process (few images)
  run = bd.convert(args(ds, str(tmp_path / "out"), "--num-shards", "2",
                        "--writer-processes", "3"))
  assert run.code == 0
  assert sorted(_SUBMITTED) == [("train", 0, 2), ("train", 1, 2)]
  got = listing(str(tmp_path / "out"))
  assert shards(got) == shards(one) and len(shards(got)) == 2
  assert run.examples == reshard["second"].examples and len(run.examples) == IMAGES
  assert run.manifest["totals"] == reshard["second"].manifest["totals"]
  assert [e["reason"] for e in run.errors] == ["missing_image"]
  assert_no_leftovers(str(tmp_path / "out"))

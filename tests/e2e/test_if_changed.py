"""`convert --if-changed` end to end: the fingerprint is listed and compared on workers (the
launcher lists no source), an unchanged run replaces nothing and says so, any change to an
image or an annotation file converts and replaces, a listing that fails fails the run."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import types
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import read_output
from PIL import Image

from beam_tfrecord import cli, pipeline, sample
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.finalize import fingerprint
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.storage import files

RUNNER = "--runner=FnApiRunner"


@pytest.fixture
def dataset(tmp_path):
  """A private dataset, for the tests that change their sources."""
  data = tmp_path / "data"
  sample.make_dataset(str(data), count=6)
  return data


@pytest.fixture(scope="module")
def first(tmp_path_factory):
  """One dataset no test changes, and its first `--if-changed` conversion (with what that
  run printed), converted once for the module: a test that only skips reads a copy of it
  (output_copy). The fingerprint covers the sources and the settings but not --output (a
  RUNTIME setting), so a copy of the output elsewhere skips like the output itself."""
  import contextlib
  root = tmp_path_factory.mktemp("if_changed")
  data, out = root / "data", root / "out"
  sample.make_dataset(str(data), count=6)
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    assert _convert(data, out, "--if-changed") == 0
  return types.SimpleNamespace(data=data, out=out, stdout=stdout.getvalue())


@pytest.fixture
def output_copy(first, tmp_path):
  """A copy (contents and modification times) of the module's first conversion."""
  out = tmp_path / "out"
  shutil.copytree(first.out, out)
  return out


def _argv(data, out, *extra):
  return ["convert", "--format", "csv", "--input", f"train={data}/train_labels.csv",
          "--input", f"val={data}/val_labels.csv", "--images", f"{data}/images",
          "--output", str(out), "--num-shards", "1", RUNNER, *extra]


def _convert(data, out, *extra):
  return cli.main(_argv(data, out, *extra))


def tree(root: Path) -> dict:
  """{relative path: bytes (None for a folder)} of everything under root, hidden included."""
  found = {}
  for folder, dirs, names in os.walk(root):
    for d in dirs:
      found[os.path.relpath(os.path.join(folder, d), root)] = None
    for n in names:
      path = os.path.join(folder, n)
      found[os.path.relpath(path, root)] = Path(path).read_bytes()
  return found


def mtimes(root: Path) -> dict:
  return {p.name: p.stat().st_mtime_ns for p in root.iterdir()}


def manifest_of(out: Path) -> dict:
  return json.loads((out / "manifest.json").read_text())


def skip_line(out: Path, manifest: dict) -> str:
  fp = manifest["source_fingerprint"]
  return (f"beam-tfrecord: skipped, sources unchanged since the run of {manifest['created']} "
          f"in {out} ({fp['files']} files, fingerprint {fp['sha256'][:12]})")


def check_recorded(out: Path, data: Path, images: int) -> dict:
  """The finished run's manifest records the sources' fingerprint as they are now: the
  value compute() lists in this process, in both places the manifest keeps it."""
  manifest = manifest_of(out)
  fp = manifest["source_fingerprint"]
  assert fp == fingerprint.compute(ConvertConfig(**manifest["config"]))
  assert manifest["config"]["source_fingerprint"] == fp
  assert (fp["version"], fp["patterns"], fp["files"]) == (fingerprint.VERSION, 3, 2 + images)
  assert fp["bytes"] == sum(f.stat().st_size for f in (data / "images").iterdir()) + sum(
      (data / f"{s}_labels.csv").stat().st_size for s in ("train", "val"))
  # the output holds exactly the run's files: nothing of ours left beside them
  assert sorted(os.listdir(out)) == sorted(manifest["files"])
  return manifest


def converted(capsys, out: Path) -> str:
  """stdout of a run that converted: the summary, no skip line."""
  stdout = capsys.readouterr().out
  assert "skipped" not in stdout and f"-> {out}" in stdout, stdout
  return stdout


# --- unchanged: skipped on the workers' word ---------------------------------------------

def test_unchanged_sources_skip_and_leave_the_output_byte_for_byte(first, output_copy, capsys):
  dataset, out = first.data, output_copy
  assert "skipped" not in first.stdout and f"-> {first.out}" in first.stdout, first.stdout
  manifest = check_recorded(out, dataset, len(os.listdir(dataset / "images")))
  before, times = tree(out), mtimes(out)

  assert _convert(dataset, out, "--if-changed") == 0
  stdout = capsys.readouterr().out
  assert stdout.splitlines() == [skip_line(out, manifest)]  # the line, and no summary
  assert tree(out) == before  # byte for byte; no run directory, no lock left
  assert mtimes(out) == times
  assert not [n for n in os.listdir(os.environ.get("TMPDIR", "/tmp"))
              if n.startswith("beam-tfrecord-work-") and manifest["run_id"] in n]

  # Again: still the run of the first conversion.
  assert _convert(dataset, out, "--if-changed") == 0
  assert capsys.readouterr().out.splitlines() == [skip_line(out, manifest)]
  assert tree(out) == before


def test_the_skip_is_seen_from_worker_processes(first, output_copy, capsys):
  """multi_processing (the Airflow DAG's DirectRunner modes): finalize runs in another
  process, and its skip still reaches the launcher (a Beam counter). The output is a copy of
  the module's in-process conversion: the runner is no setting of the fingerprint, and the
  worker processes' listing must equal the one recorded there for the run to skip."""
  dataset, out = first.data, output_copy
  mode = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
          "--direct_num_workers=2", "--if-changed"]
  argv = [a for a in _argv(dataset, out, *mode) if a != RUNNER]
  manifest = check_recorded(out, dataset, len(os.listdir(dataset / "images")))
  before = tree(out)
  capsys.readouterr()
  assert cli.main(argv) == 0
  assert capsys.readouterr().out.splitlines() == [skip_line(out, manifest)]
  assert tree(out) == before


def test_other_settings_are_another_conversion(first, output_copy, capsys):
  dataset, out = first.data, output_copy
  first = manifest_of(out)
  assert _convert(dataset, out, "--if-changed", "--bbox-policy", "drop") == 0
  converted(capsys, out)
  again = manifest_of(out)
  assert again["run_id"] != first["run_id"]
  assert again["source_fingerprint"]["sha256"] != first["source_fingerprint"]["sha256"]
  assert again["source_fingerprint"]["files"] == first["source_fingerprint"]["files"]


# --- a change converts and replaces ------------------------------------------------------

def _mirrored(path: Path) -> bytes:
  """The image flipped left to right, saved in its own format: same size, new bytes."""
  with Image.open(path) as im:
    fmt = im.format
    flipped = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
  buffer = io.BytesIO()
  flipped.save(buffer, format=fmt)
  return buffer.getvalue()


def _later(path: Path, seconds: int = 5) -> None:
  st_ = path.stat()
  os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + seconds * 1_000_000_000))


def test_a_changed_image_an_added_image_and_a_changed_annotation_each_replace(
    dataset, tmp_path, capsys):
  out = tmp_path / "out"
  images = sorted(os.listdir(dataset / "images"))
  assert _convert(dataset, out, "--if-changed") == 0
  converted(capsys, out)
  first = check_recorded(out, dataset, len(images))
  runs = [first]

  # 1. A changed image (new bytes, same name and pixel size): converted, its new bytes in.
  name = next(n for n in images if n.endswith(".jpg"))
  new_bytes = _mirrored(dataset / "images" / name)
  assert new_bytes != (dataset / "images" / name).read_bytes()
  (dataset / "images" / name).write_bytes(new_bytes)
  _later(dataset / "images" / name)
  assert _convert(dataset, out, "--if-changed") == 0
  converted(capsys, out)
  runs.append(check_recorded(out, dataset, len(images)))
  counts = {k: v for k, v in first["totals"].items() if k != "bytes"}
  assert {k: v for k, v in runs[-1]["totals"].items() if k != "bytes"} == counts
  _, record = read_output(out).by_filename()[name]
  assert record.values["image/encoded"] == new_bytes

  # 2. An added image, which no CSV row names: the sources changed, the records did not.
  (dataset / "images" / "extra.jpg").write_bytes((dataset / "images" / name).read_bytes())
  assert _convert(dataset, out, "--if-changed") == 0
  converted(capsys, out)
  runs.append(check_recorded(out, dataset, len(images) + 1))
  assert runs[-1]["source_fingerprint"]["files"] == runs[-2]["source_fingerprint"]["files"] + 1
  assert runs[-1]["totals"] == runs[-2]["totals"]

  # 3. A changed annotation file: the val CSV loses its last image's rows.
  path = dataset / "val_labels.csv"
  rows = list(csv.reader(path.read_text().splitlines()))
  dropped = rows[-1][0]
  path.write_text("".join(",".join(r) + "\n" for r in rows if r[0] != dropped))
  _later(path)
  assert _convert(dataset, out, "--if-changed") == 0
  converted(capsys, out)
  runs.append(check_recorded(out, dataset, len(images) + 1))
  assert runs[-1]["splits"]["val"]["images"] == first["splits"]["val"]["images"] - 1
  assert dropped not in read_output(out).by_filename()

  # Every run replaced the last and recorded a fingerprint of its own; a run now skips.
  assert len({r["run_id"] for r in runs}) == len({r["source_fingerprint"]["sha256"]
                                                  for r in runs}) == 4
  assert _convert(dataset, out, "--if-changed") == 0
  assert capsys.readouterr().out.splitlines() == [skip_line(out, runs[-1])]


def test_a_failed_run_is_not_compared_and_foreign_files_are_kept(first, output_copy, tmp_path,
                                                               capsys):
  dataset, out = first.data, output_copy
  path = out / "manifest.json"
  manifest = json.loads(path.read_text())
  manifest["status"] = "failed: error rate 0.5 exceeds --max-error-rate 0.1"
  path.write_text(json.dumps(manifest))
  assert _convert(dataset, out, "--if-changed") == 0  # not the last *successful* run
  converted(capsys, out)
  assert manifest_of(out)["run_id"] != manifest["run_id"]

  foreign = tmp_path / "foreign"
  foreign.mkdir()
  (foreign / "notes.txt").write_text("mine")
  assert _convert(dataset, foreign, "--if-changed") == 2  # not an earlier run of ours
  assert tree(foreign) == {"notes.txt": b"mine"}


def test_a_version_1_fingerprint_converts_once(first, output_copy, capsys):
  """An output written before the fingerprint moved onto workers: different, so converted."""
  dataset, out = first.data, output_copy
  manifest = manifest_of(out)
  manifest["source_fingerprint"] = {"sha256": "ab" * 32, "files": 8, "bytes": 11760}
  (out / "manifest.json").write_text(json.dumps(manifest))
  assert _convert(dataset, out, "--if-changed") == 0
  converted(capsys, out)
  assert _convert(dataset, out, "--if-changed") == 0
  assert "skipped" in capsys.readouterr().out


# --- the launcher lists nothing ----------------------------------------------------------

class ListingGuard:
  """Refuses (and records) every listing of a folder under `root` while the launcher works;
  while a pipeline runs (Pipeline.run: the in-process runner's workers) it only counts."""

  def __init__(self, root: Path):
    self.root = os.path.realpath(root)
    self.running = False
    self.at_launch, self.on_workers = [], []

  def _under(self, target) -> bool:
    if isinstance(target, int):  # a file descriptor: os.walk's own scandir of a dir fd
      return False
    text = os.fspath(target) if target is not None else "."
    text = text.decode() if isinstance(text, bytes) else text
    return os.path.realpath(text).startswith(self.root)

  def wrap(self, name, fn, first_arg=lambda a, k: a[0] if a else "."):
    def guarded(*args, **kwargs):
      target = first_arg(args, kwargs)
      targets = target if isinstance(target, (list, tuple)) else [target]
      if any(self._under(t) for t in targets):
        if self.running:
          self.on_workers.append((name, targets))
        else:
          self.at_launch.append((name, targets))
          raise AssertionError(f"the launcher listed {targets} ({name})")
      return fn(*args, **kwargs)
    return guarded

  def install(self, monkeypatch):
    for name in ("scandir", "listdir", "walk"):
      monkeypatch.setattr(os, name, self.wrap(f"os.{name}", getattr(os, name)))
    for name in ("list_dir", "list_tree", "walk_tree", "_list_level"):
      monkeypatch.setattr(files, name, self.wrap(f"files.{name}", getattr(files, name)))
    monkeypatch.setattr(FileSystems, "match", staticmethod(
        self.wrap("FileSystems.match", FileSystems.match)))

    def compute(config):
      raise AssertionError("fingerprint.compute called")
    monkeypatch.setattr(fingerprint, "compute", compute)

    run = beam.Pipeline.run
    guard = self

    def running(self, *args, **kwargs):
      guard.running = True
      try:
        return run(self, *args, **kwargs)
      finally:
        guard.running = False
    monkeypatch.setattr(beam.Pipeline, "run", running)


def test_the_launcher_lists_no_source(first, tmp_path, capsys, monkeypatch):
  dataset, out = first.data, tmp_path / "out"  # a conversion of its own, of unchanged sources
  images = len(os.listdir(dataset / "images"))
  guard = ListingGuard(dataset)
  guard.install(monkeypatch)

  assert _convert(dataset, out, "--if-changed") == 0
  assert guard.at_launch == []
  listed = [t for name, targets in guard.on_workers for t in targets]
  assert str(dataset / "images") in listed  # the workers listed the image root
  converted(capsys, out)
  before = tree(out)
  guard.on_workers.clear()
  assert _convert(dataset, out, "--if-changed") == 0
  assert guard.at_launch == [] and guard.on_workers
  assert capsys.readouterr().out.splitlines() == [skip_line(out, manifest_of(out))]
  assert tree(out) == before
  monkeypatch.undo()
  check_recorded(out, dataset, images)  # what the workers recorded is what is there


def test_the_guard_sees_a_launcher_that_lists(first, monkeypatch):
  """Control: the listing the launcher did before (fingerprint.compute's) is refused."""
  dataset = first.data
  guard = ListingGuard(dataset)
  compute = fingerprint.compute
  guard.install(monkeypatch)
  with pytest.raises((AssertionError, RuntimeError), match="the launcher listed"):
    compute(ConvertConfig(format="csv", inputs=[f"{dataset}/train_labels.csv"],
                          images=[str(dataset / "images")], output="/o"))
  assert guard.at_launch and not guard.on_workers


# --- the pipeline: `unchanged`, and a failure on a worker -----------------------------------

def _unchanged_of(p) -> beam.PCollection:
  found = []

  class Find(beam.pipeline.PipelineVisitor):
    def visit_transform(self, node):
      if node.full_label == "Unchanged":
        found.append(node.outputs[None])

    enter_composite_transform = visit_transform  # Create is a composite

  p.visit(Find())
  assert len(found) == 1
  return found[0]


def _build_and_run(config, run_id, check_unchanged, check_finalize=None):
  with test_pipeline.TestPipeline(runner="FnApiRunner", argv=[]) as p:
    result = pipeline.build(p, config, ["convert"], run_id=run_id)
    assert_that(_unchanged_of(p), equal_to([check_unchanged]), label="CheckUnchanged")
    if check_finalize is not None:
      assert_that(result, check_finalize, label="CheckFinalize")
  return {t.full_label for t in _labels(p)}


def _labels(p):
  found = []

  class All(beam.pipeline.PipelineVisitor):
    def visit_transform(self, node):
      found.append(node)

    enter_composite_transform = visit_transform

  p.visit(All())
  return found


def test_build_exposes_unchanged_and_lists_nothing_without_if_changed(first, output_copy):
  out = output_copy
  manifest = manifest_of(out)
  config = ConvertConfig(**dict(manifest["config"], output=str(out),
                                source_fingerprint=fingerprint.REQUESTED))
  before = tree(out)

  def finalize_skipped(results):
    assert results == [{"outcome": "unchanged", "run_id": "r1",
                        "source_fingerprint": manifest["source_fingerprint"],
                        "created": manifest["created"]}]

  labels = _build_and_run(config, "r1", True, finalize_skipped)
  assert "IfChanged/List" in labels and "CompareFingerprint" in labels
  assert tree(out) == before  # the run directory r1 is gone too

  # The sources as recorded differ from these (the module's dataset is left alone: the
  # output's record is changed instead; a change to the sources themselves is
  # test_a_changed_image_an_added_image_and_a_changed_annotation_each_replace's)
  recorded = dict(manifest["source_fingerprint"], sha256="ab" * 32)
  (out / "manifest.json").write_text(json.dumps(dict(manifest, source_fingerprint=recorded)))
  _build_and_run(config, "r2", False)  # (no lock held: finalize keeps its run as a report)

  plain = ConvertConfig(**dict(manifest["config"], output=str(out), source_fingerprint=None))
  labels = _build_and_run(plain, "r3", False)
  assert not [label for label in labels if label.startswith(("IfChanged", "Compare"))]


def test_a_listing_that_fails_on_a_worker_fails_the_run_and_keeps_the_output(
    first, output_copy, tmp_path, capsys, monkeypatch):
  # a copy of the module's sources (changed, as the run sees them: other paths) and of its
  # output (whose record says the run converted the module's sources)
  dataset, out = tmp_path / "data", output_copy
  shutil.copytree(first.data, dataset)
  published = {k: v for k, v in tree(out).items() if not k.startswith(outputs.OWN_PREFIX)}
  (dataset / "images" / "extra.jpg").write_bytes(b"changed sources: the run would convert")
  walk = fingerprint._walk_local

  def refused(root, follow_symlinks):
    if root == str(dataset / "images"):
      raise PermissionError(13, "Permission denied", root)
    return walk(root, follow_symlinks)

  monkeypatch.setattr(fingerprint, "_walk_local", refused)
  capsys.readouterr()
  assert _convert(dataset, out, "--if-changed") == 1
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("beam-tfrecord:")]
  assert len(lines) == 1, err
  assert f"--if-changed could not list {dataset / 'images'}/** (Permission denied)" in lines[0]
  assert lines[0].endswith(f"{out} is unchanged"), lines[0]
  assert {k: v for k, v in tree(out).items()
          if not k.startswith(outputs.OWN_PREFIX)} == published


def test_dataflow_job_lists_on_workers(monkeypatch):
  """A Dataflow job (built, not submitted): the fingerprint steps are in the graph and
  Finalize takes their answer as a side input; building it listed nothing on gs://."""
  from apache_beam.internal.gcp import auth
  from apache_beam.options.pipeline_options import PipelineOptions
  monkeypatch.setenv("NO_GCE_CHECK", "true")
  monkeypatch.setattr(auth._Credentials, "_credentials_init", True)
  monkeypatch.setattr(auth._Credentials, "_credentials", None)
  match = FileSystems.match

  def no_listing(patterns, *args, **kwargs):
    assert not [p for p in patterns if p.startswith("gs://demo-bucket/coco")], patterns
    return match(patterns, *args, **kwargs)

  monkeypatch.setattr(FileSystems, "match", staticmethod(no_listing))
  config = ConvertConfig(format="coco", output="gs://demo-bucket/out", num_shards=4,
                         inputs=["train=gs://demo-bucket/coco/instances_train.json"],
                         images=["gs://demo-bucket/coco/images"],
                         source_fingerprint=fingerprint.REQUESTED)
  p = beam.Pipeline(options=PipelineOptions([
      "--runner=DataflowRunner", "--dry_run=True", "--project=demo-project",
      "--region=us-central1", "--temp_location=gs://demo-bucket/tmp"]))
  pipeline.build(p, config, ["convert"])
  proto = p.run().job.proto_pipeline
  names = {t.unique_name: t for t in proto.components.transforms.values()}
  for step in ("IfChanged/Patterns", "IfChanged/List", "IfChanged/Combine",
               "CompareFingerprint", "Unchanged"):
    assert step in names, sorted(names)
  from apache_beam.portability.api import beam_runner_api_pb2
  finalize = names["Finalize"]
  side = beam_runner_api_pb2.ParDoPayload.FromString(finalize.spec.payload).side_inputs
  assert len(side) == 8  # stats, errors, label map, error files, beam files, plan, if_changed,
  # keypoints
  compared = names["CompareFingerprint"].outputs["None"]
  [tag] = [tag for tag, pc in finalize.inputs.items() if pc == compared]
  assert tag in side  # the comparison reaches Finalize as a side input

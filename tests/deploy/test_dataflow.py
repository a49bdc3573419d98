"""Dataflow, offline: the job graph DataflowRunner builds, what it stages, the Flex Template's
parameters, and how the CLI reports a job's final state. Nothing here reaches Google Cloud:
--dry_run builds the job without submitting, a localhost --dataflow_endpoint with a
--template_location makes Beam stage and write the template locally, and credentials are
stubbed so Beam's auth does not retry for ~36 s.
"""
from __future__ import annotations

import ast
import base64
import bz2
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tarfile
from typing import Dict, Set

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2

from beam_tfrecord import cli
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.pipeline import build

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATAFLOW = os.path.join(ROOT, "deploy", "dataflow")
GBK_URN = "beam:transform:group_by_key:v1"
PARDO_URN = "beam:transform:pardo:v1"
# Beam's validator wants a real-looking project id and bucket name (3+ characters).
DRY_RUN = ["--runner=DataflowRunner", "--dry_run=True", "--project=demo-project",
           "--region=us-central1", "--temp_location=gs://demo-bucket/tmp"]


@pytest.fixture(autouse=True)
def offline_gcp(monkeypatch):
  """No metadata-server probe, no credential look-up (anonymous, as Beam falls back to)."""
  from apache_beam.internal.gcp import auth
  monkeypatch.setenv("NO_GCE_CHECK", "true")
  monkeypatch.setattr(auth._Credentials, "_credentials_init", True)
  monkeypatch.setattr(auth._Credentials, "_credentials", None)


def coco_config(**kw) -> ConvertConfig:
  defaults = dict(format="coco", output="gs://demo-bucket/out", num_shards=4,
                  inputs=["train=gs://demo-bucket/coco/instances_train.json",
                          "val=gs://demo-bucket/coco/instances_val.json"],
                  images=["gs://demo-bucket/coco/images"])
  defaults.update(kw)
  return ConvertConfig(**defaults)


def dry_run(config: ConvertConfig, extra=()):
  p = beam.Pipeline(options=PipelineOptions(DRY_RUN + list(extra)))
  build(p, config, ["convert"])
  result = p.run()
  return result.job.proto_pipeline


class Graph:
  """The runner API pipeline as leaf transforms and the PCollections between them."""

  def __init__(self, proto):
    self.transforms = proto.components.transforms
    self.leaves = {tid: t for tid, t in self.transforms.items() if not t.subtransforms}
    self.producer = {pc: tid for tid, t in self.leaves.items() for pc in t.outputs.values()}

  def names(self, urn=None) -> Dict[str, str]:
    return {tid: t.unique_name for tid, t in self.leaves.items()
            if urn is None or t.spec.urn == urn}

  def ancestors(self, tid: str) -> Set[str]:
    seen, todo = set(), [tid]
    while todo:
      for pc in self.leaves[todo.pop()].inputs.values():
        parent = self.producer.get(pc)
        if parent and parent not in seen:
          seen.add(parent)
          todo.append(parent)
    return seen

  def top_level(self, proto) -> Set[str]:
    root = self.transforms[proto.root_transform_ids[0]]
    return {self.transforms[t].unique_name for t in root.subtransforms}


def makes_image_bytes(name: str) -> bool:
  """Steps whose main output is serialized examples (image bytes inside): the beam sink's
  encoder. The default shard writer reads and writes image bytes inside one DoFn and emits
  only small stats and error records."""
  return bool(re.search(r"(^|/)Encode(/|$)", name))


def gbks_after_bytes(graph: Graph):
  """GroupByKeys whose main input descends from an encoder's main output (stats and error
  outputs are small; side inputs are not shuffled)."""
  def main_inputs(t):
    side = set()
    if t.spec.urn == PARDO_URN:
      side = set(beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).side_inputs)
    return [pc for tag, pc in t.inputs.items() if tag not in side]

  carrying = {pc for t in graph.leaves.values() if makes_image_bytes(t.unique_name)
              for tag, pc in t.outputs.items() if tag not in ("stats", "errors", "contents")}
  changed = True
  while changed:
    changed = False
    for t in graph.leaves.values():
      if any(pc in carrying for pc in main_inputs(t)):
        new = set(t.outputs.values()) - carrying
        if new:
          carrying |= new
          changed = True
  return sorted(t.unique_name for t in graph.leaves.values()
                if t.spec.urn == GBK_URN and any(pc in carrying for pc in main_inputs(t)))


def test_dry_run_graph_has_the_stages_and_shuffles_no_image_bytes():
  proto = dry_run(coco_config())
  graph = Graph(proto)
  top = graph.top_level(proto)
  for stage in ("ReadCoco", "Prepare", "LabelMap", "Plan", "WriteShards", "Finalize",
                "WriteErrors"):
    assert stage in top, f"{stage} missing from {sorted(top)}"
  gbks = graph.names(GBK_URN)
  assert any(n.startswith("WriteShards/") for n in gbks.values()), gbks
  # No GroupByKey sits downstream of a step that emits encoded examples ...
  assert gbks_after_bytes(graph) == []
  # ... and the shard grouping carries annotations: its inputs come from the source and
  # Prepare, never from a step that opens image files.
  shard_gbk = next(t for t, n in gbks.items() if n.startswith("WriteShards/"))
  upstream = {graph.leaves[a].unique_name for a in graph.ancestors(shard_gbk)}
  assert any(n.startswith("Prepare/") for n in upstream)
  assert any(n.startswith("ReadCoco/") for n in upstream)
  assert not any(n.startswith("WriteShards/Write") for n in upstream), sorted(upstream)
  assert not [n for n in upstream if makes_image_bytes(n)]
  # The DoFns are importable from the package: nothing pickled refers to __main__, so
  # workers need no --save_main_session.
  for t in graph.leaves.values():
    if t.spec.urn == PARDO_URN:
      payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).do_fn.payload
      assert b"__main__" not in bz2.decompress(base64.b64decode(payload)), t.unique_name


def test_the_byte_check_catches_a_shuffle_of_encoded_examples():
  """Control: with --sink beam, WriteToTFRecord shuffles the encoded examples, and the check
  used above must flag exactly that."""
  graph = Graph(dry_run(coco_config(sink="beam")))  # num_shards=4: round-robin keyed examples
  flagged = gbks_after_bytes(graph)
  assert flagged == ["WriteBeam/Write[train]/Write/WriteImpl/GroupByKey",
                     "WriteBeam/Write[val]/Write/WriteImpl/GroupByKey"], flagged


def test_staged_job_carries_the_package(tmp_path):
  """Beam stages locally and writes the template when the endpoint is local: the package
  built from setup.py (workflow.tar.gz) is among the staged artifacts, with everything the
  workers import, and the worker image option reaches the job."""
  staging, temp = tmp_path / "staging", tmp_path / "temp"
  staging.mkdir()
  temp.mkdir()
  template = tmp_path / "template.json"
  image = "us-central1-docker.pkg.dev/demo-project/beam-tfrecord/beam-tfrecord-worker:test"
  cwd = os.getcwd()
  os.chdir(ROOT)  # Beam builds the sdist with the setup file's directory layout
  try:
    p = beam.Pipeline(options=PipelineOptions([
        "--runner=DataflowRunner", "--project=demo-project", "--region=us-central1",
        f"--temp_location={temp}", f"--staging_location={staging}",
        f"--template_location={template}", "--dataflow_endpoint=http://localhost:1",
        f"--setup_file={os.path.join(ROOT, 'setup.py')}", f"--sdk_container_image={image}"]))
    build(p, coco_config(), ["convert"])
    result = p.run()
  finally:
    os.chdir(cwd)
  assert not result.has_job  # a template: nothing was submitted
  staged = sorted(os.listdir(staging))
  assert "workflow.tar.gz" in staged, staged
  with tarfile.open(staging / "workflow.tar.gz") as tar:
    names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    pkg_info = next(m for m in tar.getmembers() if m.name.count("/") == 1
                    and m.name.endswith("/PKG-INFO"))
    info = tar.extractfile(pkg_info).read().decode()
  package = {os.path.relpath(os.path.join(d, f), ROOT)
             for d, _, fs in os.walk(os.path.join(ROOT, "beam_tfrecord")) for f in fs
             if f.endswith(".py")}
  missing = sorted(package - names)
  assert not missing, f"not in the staged package: {missing}"
  for module in ("setup.py", "pipelines/coco_to_tfrecord.py", "beam_tfrecord/sources/coco/__init__.py"):
    assert module in names
  assert "Name: beam-tfrecord" in info
  job = json.loads(template.read_text())
  packages = [pkg["name"] for pool in job["environment"]["workerPools"]
              for pkg in pool.get("packages", [])]
  assert "workflow.tar.gz" in packages
  images = [c["containerImage"] for pool in job["environment"]["workerPools"]
            for c in pool.get("sdkHarnessContainerImages", [])]
  assert images == [image]
  options = job["environment"]["sdkPipelineOptions"]["options"]
  assert options.get("save_main_session") in (None, False)


def test_setup_py_declares_what_the_workers_import():
  """The workers install setup.py's install_requires: every third-party module the package
  imports must be provided by one of them."""
  tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
  install_requires = next(ast.literal_eval(k.value) for node in ast.walk(tree)
                          if isinstance(node, ast.Call) for k in node.keywords
                          if k.arg == "install_requires")
  requires = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in install_requires}
  provides = {"apache_beam": "apache-beam", "tensorflow": "tensorflow", "PIL": "pillow",
              "pandas": "pandas", "google_crc32c": "google-crc32c", "ijson": "ijson",
              "defusedxml": "defusedxml", "google": "protobuf", "rich": "rich",
              "numpy": "tensorflow", "yaml": "pyyaml", "pycocotools": "pycocotools",
              "matplotlib": "matplotlib", "pyarrow": "pyarrow", "array_record": "array-record",
              "requests": "apache-beam"}  # google-cloud-storage's transport (apache-beam[gcp])
  # imported inside a function only, for `inspect --plot`: an extra, not a worker requirement
  optional = {"matplotlib": "plots"}
  extras = next(ast.literal_eval(k.value) for node in ast.walk(tree)
                if isinstance(node, ast.Call) for k in node.keywords
                if k.arg == "extras_require")
  stdlib = set(__import__("sys").stdlib_module_names)
  imported = set()
  for d, _, files in os.walk(os.path.join(ROOT, "beam_tfrecord")):
    for f in files:
      if f.endswith(".py"):
        tree = ast.parse(open(os.path.join(d, f), encoding="utf-8").read())
        for node in ast.walk(tree):
          if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
          elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
  third_party = sorted(m for m in imported - stdlib - {"beam_tfrecord", "__future__"})
  unknown = [m for m in third_party if m not in provides]
  assert not unknown, f"imports with no known distribution: {unknown}"
  missing = sorted({provides[m] for m in third_party if m not in optional} - requires)
  assert not missing, f"setup.py install_requires lacks {missing}"
  for module, extra in optional.items():
    assert any(r.startswith(provides[module]) for r in extras[extra]), (module, extra)


# ---------------------------------------------------------------- Flex Template parameters

def _flex_main():
  spec = importlib.util.spec_from_file_location("flex_main",
                                                os.path.join(DATAFLOW, "flex_main.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


EXAMPLES = {  # a realistic value per template parameter
    "format": "coco",
    "input": "train=gs://demo-bucket/coco/instances_train2017.json;"
             "val=gs://demo-bucket/coco/instances_val2017.json",
    "images": "train=gs://demo-bucket/coco/train2017;val=gs://demo-bucket/coco/val2017",
    "output": "gs://demo-bucket/tfrecords/coco2017",
    "label_map": "gs://demo-bucket/label_map.pbtxt",
    "layout": "tfds", "dataset_name": "my_boxes", "dataset_version": "1.2.0",
    "file_format": "array_record", "index_files": "true",
    "classes": "person,car", "class_map": "cat=pet,dog=pet",
    "classes_file": "gs://demo-bucket/model_data/voc_classes.txt",
    "class_descriptions": "gs://demo-bucket/oid/class-descriptions-boxable.csv",
    "schema": "classification",
    "split": "train=0.8,val=0.1,test=0.1",
    "num_shards": "64",
    "shard_size_mb": "200",
    "sink": "shards",
    "csv_columns": "filename=path,class=label",
    "csv_normalized": "true",
    "bbox_policy": "drop",
    "allow_absolute_paths": "true",
    "follow_symlinks": "true",
    "max_error_rate": "0.01",
    "strict": "true",
    "max_pixels": "100000000",
    "exif_frame": "displayed",
    "verify_images": "true",
    "overwrite": "true",
    "if_changed": "true", "plan_from": "gs://demo-bucket/tfrecords/coco2017-v1",
    "incremental": "true",
    "append": "true", "keep": "5", "retain_hours": "0.5", "compact": "true",
    "feature_names": "image_raw=image,depth=channels",
    "include_masks": "true",
    "max_side": "640",
    "resize": "640x640",
    "image_format": "jpeg",
    "jpeg_quality": "90",
    "records_per_shard": "4096",
    "shard_name_template": "file_{index:02d}-{count}.tfrec",
    "max_image_bytes": "1000000", "writer_processes": "2", "image_sets": "train,val", "break_lock": "true",
}


def test_every_template_parameter_is_a_cli_option():
  metadata = json.load(open(os.path.join(DATAFLOW, "metadata.json")))
  flex = _flex_main()
  actions = flex.convert_actions()
  parser = cli.make_parser()
  names = [p["name"] for p in metadata["parameters"]]
  assert len(names) == len(set(names))
  for param in metadata["parameters"]:
    name = param["name"]
    assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
    assert param["label"] and param["helpText"]
    option = name.replace("_", "-")
    assert option in actions, f"template parameter {name} is no convert option"
    assert f"--{option}" in param["helpText"], name
    value = EXAMPLES[name]
    for regex in param.get("regexes", []):
      assert re.fullmatch(regex, value), (name, regex, value)
    argv = flex.translate([f"--{name}={value}"], actions)
    base = {"format": ["--format=voc"], "input": ["--input=gs://demo-bucket/x"],
            "output": ["--output=gs://demo-bucket/o"]}
    others = [a for k, v in base.items() if k != name for a in v]
    args, unknown = parser.parse_known_args(["convert", *others, *argv])
    assert unknown == [], (name, unknown)
    dest = actions[option].dest
    assert getattr(args, dest) not in (None, False, []), name
  # Required ones are required in both; every convert option has its parameter.
  required = {p["name"] for p in metadata["parameters"] if not p.get("isOptional")}
  assert required == {n.replace("-", "_") for n, a in actions.items() if a.required}
  missing = sorted(n for n in actions if n.replace("-", "_") not in names)
  assert not missing, f"add these convert options to deploy/dataflow/metadata.json: {missing}"


def test_regexes_reject_bad_values():
  params = {p["name"]: p for p in json.load(open(os.path.join(DATAFLOW, "metadata.json")))
            ["parameters"]}
  bad = {"format": "labelme2", "layout": "nested", "dataset_name": "My-Name", "output": "/local/dir", "input": "train=/local/x.json",
         "num_shards": "0", "shard_size_mb": "-5", "bbox_policy": "keep", "overwrite": "yes",
         "append": "yes", "keep": "-1", "retain_hours": "-2", "compact": "1"}
  for name, value in bad.items():
    assert not all(re.fullmatch(r, value) for r in params[name]["regexes"]), (name, value)


def test_flex_main_translates_lists_flags_and_passes_beam_options():
  flex = _flex_main()
  out = flex.translate(["--input=train=gs://b1x/a.json;val=gs://b1x/b.json",
                        "--num_shards=8", "--overwrite=false", "--if_changed=true",
                        "--temp_location=gs://b1x/tmp", "--job_name=j"])
  assert out == ["--input=train=gs://b1x/a.json", "--input=val=gs://b1x/b.json",
                 "--num-shards=8", "--if-changed", "--temp_location=gs://b1x/tmp",
                 "--job_name=j"]


def test_append_and_keep_parameters():
  """append (true/false) and keep (an integer) reach convert as --append and --keep N, and
  their help says what the output becomes."""
  params = {p["name"]: p for p in json.load(open(os.path.join(DATAFLOW, "metadata.json")))
            ["parameters"]}
  append, keep = params["append"], params["keep"]
  assert append["isOptional"] and keep["isOptional"]
  for text in ("versions/", "LATEST", "no symlinks", "--append"):
    assert text in append["helpText"], text
  assert "--keep" in keep["helpText"] and "LATEST" in keep["helpText"]
  assert [re.fullmatch(append["regexes"][0], v) is not None
          for v in ("true", "false", "yes", "")] == [True, True, False, False]
  assert [re.fullmatch(keep["regexes"][0], v) is not None
          for v in ("0", "5", "12", "-1", "five", "")] == [True, True, True, False, False, False]
  flex = _flex_main()
  out = flex.translate(["--output=gs://b1x/out", "--append=true", "--keep=5"])
  assert out == ["--output=gs://b1x/out", "--append", "--keep=5"]
  assert flex.translate(["--append=false", "--keep=0"]) == ["--keep=0"]
  args, unknown = cli.make_parser().parse_known_args(
      ["convert", "--format=coco", "--input=gs://b1x/a.json", *out])
  assert unknown == [] and args.append is True and args.keep == 5


def test_flex_main_refuses_append_until_a_launch_can_publish(monkeypatch, capsys):
  """convert --append writes LATEST in the launching process after the job; a template launch
  does not wait, so append=true is refused before anything is submitted (append=false and the
  other parameters go through)."""
  flex = _flex_main()
  calls = []
  monkeypatch.setattr(cli, "main", lambda argv: calls.append(argv) or 0)
  base = ["--format=coco", "--input=gs://b1x/a.json", "--output=gs://b1x/out"]
  assert flex.main([*base, "--append=true", "--keep=5"]) == 2
  assert calls == [] and "append=true cannot publish" in capsys.readouterr().err
  assert flex.main([*base, "--append=false"]) == 0
  assert calls == [["convert", *base, "--no_wait_until_finish"]]
  assert "refused at launch" in {p["name"]: p for p in json.load(open(os.path.join(
      DATAFLOW, "metadata.json")))["parameters"]}["append"]["helpText"]


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud not installed")
def test_gcloud_accepts_the_template_spec(tmp_path):
  """`gcloud dataflow flex-template build --print-only` parses metadata.json offline."""
  env = dict(os.environ, CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
             CLOUDSDK_CORE_DISABLE_PROMPTS="1")
  out = subprocess.run(
      ["gcloud", "dataflow", "flex-template", "build", "gs://demo-bucket/t.json",
       "--project=demo-project", "--image=us-central1-docker.pkg.dev/p/r/launcher:1",
       "--sdk-language=PYTHON", f"--metadata-file={os.path.join(DATAFLOW, 'metadata.json')}",
       "--print-only"], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert '"name": "if_changed"' in out.stdout


def test_build_and_run_scripts_dry_run(tmp_path):
  env = dict(os.environ, PROJECT="demo-project", REGION="us-central1", BUCKET="demo-bucket",
             DRY_RUN="1", BUILDER="cloudbuild", TMPDIR=str(tmp_path))
  out = subprocess.run(["bash", os.path.join(DATAFLOW, "build.sh")], env=env,
                       capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  context = re.search(r"build context: (\S+)", out.stdout).group(1)
  for dockerfile in ("Dockerfile", "Dockerfile.worker"):
    text = open(os.path.join(DATAFLOW, dockerfile)).read()
    for src in re.findall(r"^COPY\s+(\S+)\s", text, re.M):
      assert os.path.exists(os.path.join(context, src)), (dockerfile, src)
  assert "flex-template build gs://demo-bucket/templates/" in out.stdout
  out = subprocess.run(["bash", os.path.join(DATAFLOW, "run.sh"), "format=coco",
                        "input=train=gs://demo-bucket/a.json;val=gs://demo-bucket/b.json",
                        "output=gs://demo-bucket/out", "split=train=0.9,val=0.1"],
                       env=env, capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  assert "flex-template run" in out.stdout and "sdk_container_image=" in out.stdout
  assert "split=train=0.9\\,val=0.1" in out.stdout  # one parameter despite the comma


# ------------------------------------------------------------ the CLI and the job's state

class FakeResult:
  def __init__(self, state=None, raises=None, job_id=None):
    self._state, self._raises, self._job_id = state, raises, job_id
    self.has_job = job_id is not None
    self.state = state

  def job_id(self):
    return self._job_id

  def wait_until_finish(self, duration=None):
    if self._raises:
      raise self._raises
    return self._state


@pytest.fixture
def local_config(tmp_path):
  """A real (tiny) COCO input: the pre-run checks read it before any runner is involved."""
  (tmp_path / "in").mkdir()
  (tmp_path / "in" / "instances.json").write_text(json.dumps(
      {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [], "categories": []}))
  return ConvertConfig(format="coco", inputs=[str(tmp_path / "in" / "instances.json")],
                       images=[str(tmp_path / "in")], output=str(tmp_path / "out"))


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "UPDATED"])
def test_cli_exits_1_when_the_job_does_not_end_done(monkeypatch, capsys, local_config, state):
  from apache_beam.runners.runner import PipelineState
  monkeypatch.setattr(beam.Pipeline, "run",
                      lambda self, *a, **k: FakeResult(getattr(PipelineState, state)))
  assert cli.run_convert(local_config, [], ["convert"]) == 1
  assert f"pipeline ended in state {state}" in capsys.readouterr().err


def test_cli_exits_1_when_dataflow_raises_for_a_failed_job(monkeypatch, capsys, local_config):
  from apache_beam.runners.dataflow.dataflow_runner import \
      DataflowRuntimeException
  error = DataflowRuntimeException("Dataflow pipeline failed. State: FAILED", None)
  monkeypatch.setattr(beam.Pipeline, "run", lambda self, *a, **k: FakeResult(
      "FAILED", raises=error, job_id="2026-01-01_00_00_00-123"))
  assert cli.run_convert(local_config, ["--project=demo-project", "--region=us-central1"],
                         ["convert"]) == 1
  err = capsys.readouterr().err
  # The id in the form Airflow's Dataflow hook parses, then the failure.
  assert "Created job with id: [2026-01-01_00_00_00-123]" in err
  assert "pipeline ended in state FAILED" in err


def test_cli_submits_without_waiting_when_asked(monkeypatch, capsys, local_config):
  result = FakeResult("RUNNING", job_id="job-1")
  result.wait_until_finish = lambda duration=None: pytest.fail("must not wait")
  monkeypatch.setattr(beam.Pipeline, "run", lambda self, *a, **k: result)
  assert cli.run_convert(local_config, ["--no_wait_until_finish"], ["convert"]) == 0
  assert "Created job with id: [job-1]" in capsys.readouterr().err


def test_cli_dry_run_on_dataflow_exits_0(tmp_path, capsys):
  """The whole CLI path with DataflowRunner --dry_run: builds the job, runs nothing."""
  code = cli.main(["convert", "--format", "coco", "--input",
                   str(tmp_path / "instances.json"), "--output", str(tmp_path / "out"),
                   *DRY_RUN])
  assert code == 0
  assert "not run" in capsys.readouterr().err


def test_one_beam_version_everywhere():
  """setup.py pins Beam (issue 39, item 5); the Dataflow images, the launcher they build and
  this venv are at that version: a job graph and its workers' SDK must match."""
  import importlib.metadata
  root = os.path.dirname(os.path.dirname(DATAFLOW))
  [pinned] = re.findall(r'"apache-beam\[gcp\]==([0-9.]+)"', open(os.path.join(root, "setup.py")).read())
  assert importlib.metadata.version("apache-beam") == pinned
  for dockerfile in ("Dockerfile", "Dockerfile.worker"):
    text = open(os.path.join(DATAFLOW, dockerfile)).read()
    found = set(re.findall(r"apache-beam\[gcp\]==([0-9.]+)|beam_python3\.\d+_sdk:([0-9.]+)|"
                           r"__version__ == '([0-9.]+)'", text))
    versions = {v for match in found for v in match if v}
    assert versions == {pinned}, (dockerfile, versions)

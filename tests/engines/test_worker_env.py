"""The PROCESS workers run what the job staged, as Dataflow's would (issue 39, item 2).

deploy/engines/convert-on.sh stages the project with --setup_file (Beam's stager builds its
sdist), and worker.sh gives each SDK worker a fresh venv over the worker image (apache-beam at
the SDK's version, pinned as Beam's container pins it) into which Beam's boot pip-installs the
staged sdist, and what setup.py declares comes from a layer made for that setup.py
(--deps image, the default) or is installed by that pip too (--deps staged). Two checks, on
Prism:
- a probe pipeline reports the worker's interpreter: its venv is not the project's, nothing of
  the repository or the launcher's venv is on its path, beam_tfrecord comes from the staged
  sdist, apache_beam from the image, and the venv holds only beam-tfrecord (and, staged, the
  dependencies setup.py brought; no pytest, no dev extras);
- a setup.py without pycocotools (a copy of the project's, one line removed) makes a
  conversion with --include-masks fail on the engine, with a non-zero exit, pycocotools named
  in the error, and no output, while the launcher (the project's venv) has pycocotools.
  (Before beam_tfrecord/write/encode.py let ImportError through, each image became an
  `unexpected_error` record instead: tests/write/test_missing_dependency.py.)

Marked `engines`; run with `python -m pytest -m engines tests/engines/test_worker_env.py`
after `bash deploy/engines/setup.sh`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_runners  # noqa: E402

pytestmark = pytest.mark.engines

REPO, BEAM_VERSION, BOOT = compare_runners.REPO, compare_runners.BEAM_VERSION, compare_runners.BOOT
PRISM = Path(os.environ.get("PRISM", compare_runners.CACHE / "prism" / f"v{BEAM_VERSION}" / "prism"))

PROBE = '''
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions


def probe(_):
  import importlib.metadata, importlib.util, json, os, sys, sysconfig
  import apache_beam, beam_tfrecord
  purelib = sysconfig.get_path("purelib")
  in_venv = sorted(d.metadata["Name"].lower().replace("_", "-")
                   for d in importlib.metadata.distributions(path=[purelib]))
  return json.dumps({
      "prefix": sys.prefix, "base_prefix": sys.base_prefix, "path": sys.path,
      "purelib": purelib, "cwd": os.getcwd(), "in_venv": in_venv,
      "beam_tfrecord": beam_tfrecord.__file__, "apache_beam": apache_beam.__file__,
      "pytest": importlib.util.find_spec("pytest") is not None,
      "pycocotools": importlib.util.find_spec("pycocotools") is not None,
      "tensorflow": importlib.util.find_spec("tensorflow").origin,
      "PYTHONPATH": os.environ.get("PYTHONPATH"),
  })


def main(argv):
  out = argv[0]
  with beam.Pipeline(options=PipelineOptions(argv[1:])) as p:
    _ = (p | beam.Create([0]) | beam.Map(probe)
         | beam.io.WriteToText(out, shard_name_template="", num_shards=1))


if __name__ == "__main__":
  main(sys.argv[1:])
'''


@pytest.fixture(autouse=True)
def _selected(request):
  compare_runners.skip_unless_selected(
      request, "Prism jobs whose workers install the staged project; after setup.sh")
  absent = [str(p) for p in (PRISM, BOOT) if not os.access(p, os.X_OK)]
  if absent:
    pytest.skip(f"Prism for Beam {BEAM_VERSION} not built ({', '.join(absent)} missing): "
                "run bash deploy/engines/setup.sh")


def _env(**extra) -> dict:
  env = compare_runners.environment(REPO)
  env.update(PRISM=str(PRISM), BEAM_BOOT=str(BOOT), **extra)
  # the launcher's own path, which must not reach the workers
  env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  return env


@pytest.mark.parametrize("deps", ["image", "staged"])
def test_the_worker_runs_only_what_the_job_staged(tmp_path, deps):
  """--deps image (the default): setup.py's dependencies from the layer setup.sh made for it,
  the project from the staged sdist; --deps staged: both installed by boot's pip."""
  script = tmp_path / "probe.py"
  script.write_text(PROBE)
  out = tmp_path / "probe.json"
  done = subprocess.run(
      ["bash", str(compare_runners.CONVERT_ON), "prism", "--deps", deps, "--run", str(script),
       "--", str(out)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-5000:]
  seen = json.loads(out.read_text())
  venv = Path(seen["prefix"])
  launcher = Path(compare_runners.python()).parent.parent   # the project's .venv
  assert venv != launcher and venv.name == "venv", seen["prefix"]
  assert seen["base_prefix"] != seen["prefix"]              # a venv
  # nothing of the repository, the launcher's venv or the launcher's PYTHONPATH
  assert seen["PYTHONPATH"] is None
  for entry in seen["path"]:
    assert not entry.startswith(str(REPO)) and not entry.startswith(str(launcher)), entry
  assert not seen["cwd"].startswith(str(REPO)), seen["cwd"]
  # the project: installed from the staged sdist into the worker's venv
  assert seen["beam_tfrecord"].startswith(seen["purelib"] + "/beam_tfrecord/"), seen
  # Beam: from the worker image (below the venv), not the launcher's
  images = compare_runners.CACHE / "worker-image"   # setup.sh worker's
  assert seen["apache_beam"].startswith(str(images)), seen["apache_beam"]
  # the venv holds beam-tfrecord and what setup.py brought over the image (the wheels
  # setup.sh resolved for it), nothing else
  pins = {line.split("==")[0].lower().replace("_", "-")
          for stamp in images.glob("*-wheels/.for-*") for line in stamp.read_text().split()}
  assert "beam-tfrecord" in seen["in_venv"], seen["in_venv"]
  assert seen["pycocotools"] is True
  if deps == "staged":
    assert "tensorflow" in seen["in_venv"] and "pycocotools" in seen["in_venv"], seen["in_venv"]
    assert set(seen["in_venv"]) - {"beam-tfrecord"} <= pins, set(seen["in_venv"]) - pins
  else:  # the venv holds the project alone; its dependencies come from the layer
    assert seen["in_venv"] == ["beam-tfrecord"], seen["in_venv"]
    sha = hashlib.sha256((REPO / "setup.py").read_bytes()).hexdigest()[:16]
    layer = next(images.glob(f"*-deps/{sha}"))
    assert seen["tensorflow"].startswith(f"{layer}/tensorflow/"), seen["tensorflow"]
  # a dev extra of the project's venv (not in install_requires) is not on the worker
  assert seen["pytest"] is False


def test_a_dependency_missing_from_setup_py_fails_on_the_engine(tmp_path):
  """The staged package lacks pycocotools (its setup.py's install_requires without it): the
  conversion with --include-masks must fail on the engine, as it would on Dataflow. With the
  default --deps image too: the layer is made from the staged setup.py's own resolution."""
  project = tmp_path / "project"
  shutil.copytree(REPO / "beam_tfrecord", project / "beam_tfrecord",
                  ignore=shutil.ignore_patterns("__pycache__"))
  for name in ("MANIFEST.in", "README.md"):
    if (REPO / name).exists():
      shutil.copy(REPO / name, project / name)
  if (REPO / "pipelines").is_dir():
    shutil.copytree(REPO / "pipelines", project / "pipelines",
                    ignore=shutil.ignore_patterns("__pycache__"))
  setup = (REPO / "setup.py").read_text()
  lines = [line for line in setup.splitlines(keepends=True) if '"pycocotools' not in line]
  assert len(lines) == len(setup.splitlines()) - 1
  (project / "setup.py").write_text("".join(lines))
  sources = compare_runners.small_sources(tmp_path / "data")
  output = tmp_path / "out"
  done = subprocess.run(
      ["bash", str(compare_runners.CONVERT_ON), "prism", "--", *sources["coco-masks"],
       f"--output={output}"], cwd=tmp_path,
      env=_env(BEAM_TFRECORD_SETUP_FILE=str(project / "setup.py")),
      capture_output=True, text=True, timeout=900)
  assert done.returncode != 0, done.stderr[-3000:]
  assert "No module named 'pycocotools'" in done.stderr, done.stderr[-5000:]
  # no output: at most the failed run's own report, in its hidden run directory
  # (docs/safety.md: only a successful run replaces an output)
  made = [p.name for p in output.iterdir()] if output.exists() else []
  assert all(name.startswith(".beam-tfrecord-run-") for name in made), made
  # the launcher itself has pycocotools: only the staged environment lacks it
  assert subprocess.run([compare_runners.python(), "-c", "import pycocotools"]).returncode == 0

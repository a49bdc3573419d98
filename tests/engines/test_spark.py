"""Conversions on a standalone Spark cluster give the DirectRunner's bytes (issue 39).

deploy/engines/convert-on.sh spark runs convert with Beam's SparkRunner: Beam's Spark job server
(the Spark driver) on this machine, the job's stages on the executors of a cluster of one
master and two workers, each a JVM of its own (deploy/engines/cluster.sh), and the Python SDK
harness in worker processes the executors start (--environment_type=PROCESS, worker.sh), as
Dataflow Runner v2 does: DoFns, side inputs and coders are pickled and cross processes, each
worker starts with fresh module state, the shuffles are Spark's, and the pipeline takes its
distributed path. Each case converts a small dataset there and with the default in-process
runner, and compares every output file byte for byte (READMEs and the manifest's times and paths
aside).

Marked `engines` and not part of the default suite: skipped unless the marker expression
names `engines`. Run with
  bash deploy/engines/setup.sh spark        # pyspark (PyPI), the job server (Maven Central)
  python -m pytest -m engines tests/engines/test_spark.py
Skipped, with the reason, when setup.sh spark has not made what it needs. A cluster already
running (cluster.sh start spark) is used and left running; else the test starts one and stops
it at the end.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_runners  # noqa: E402

pytestmark = pytest.mark.engines

BEAM_VERSION, CACHE, BOOT = compare_runners.BEAM_VERSION, compare_runners.CACHE, compare_runners.BOOT
SPARK_VERSION = os.environ.get("SPARK_VERSION", "3.5.0")
SPARK_HOME = Path(os.environ.get("SPARK_HOME",
                                 CACHE / "spark" / f"pyspark-{SPARK_VERSION}" / "pyspark"))
JOB_SERVER_FOR = CACHE / "spark" / f"job-server-for-{BEAM_VERSION}"
CLUSTER = compare_runners.REPO / "deploy" / "engines" / "cluster.sh"
MASTER_UI = "http://127.0.0.1:8080/json/"


@pytest.fixture(autouse=True)
def _selected(request):
  compare_runners.skip_unless_selected(
      request, "minutes of Spark jobs; after bash deploy/engines/setup.sh spark")


def _missing() -> str:
  absent = []
  if not shutil.which("java"):
    absent.append("java on PATH")
  if not (SPARK_HOME / "sbin" / "spark-daemon.sh").is_file():
    absent.append(str(SPARK_HOME))
  if not (JOB_SERVER_FOR.is_file() and Path(JOB_SERVER_FOR.read_text().strip()).is_file()):
    absent.append(f"the job server named by {JOB_SERVER_FOR}")
  if not os.access(BOOT, os.X_OK):
    absent.append(str(BOOT))
  return (f"Spark for Beam {BEAM_VERSION} not set up ({', '.join(absent)} missing): run "
          "bash deploy/engines/setup.sh spark" if absent else "")


def _master() -> dict:
  """The standalone master's state (its web UI's JSON), {} when no master answers."""
  try:
    with urllib.request.urlopen(MASTER_UI, timeout=5) as answer:
      return json.load(answer)
  except OSError:
    return {}


@pytest.fixture(scope="module")
def cluster(request):
  """A running cluster: the one there is, else one this test starts (and stops). (A module
  fixture is set up before the function-scoped _selected: it checks the selection itself, or
  an unselected run would start a cluster.)"""
  compare_runners.skip_unless_selected(
      request, "minutes of Spark jobs; after bash deploy/engines/setup.sh spark")
  if _missing():
    pytest.skip(_missing())
  started = False
  if not _master():
    start = subprocess.run(["bash", str(CLUSTER), "start", "spark"], capture_output=True,
                           text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-3000:]
    started = True
  try:
    alive = [w for w in _master().get("workers", []) if w.get("state") == "ALIVE"]
    assert len(alive) >= 2, f"the master counts {len(alive)} ALIVE workers"
    yield
  finally:
    if started:
      stop = subprocess.run(["bash", str(CLUSTER), "stop", "spark"], capture_output=True,
                            text=True, timeout=180)
      assert stop.returncode == 0 and not _master(), stop.stderr[-3000:]


@pytest.fixture(scope="module")
def inputs(cluster, tmp_path_factory):
  return compare_runners.small_sources(tmp_path_factory.mktemp("engines"))


def test_spark_gives_the_direct_runners_bytes(inputs, tmp_path, monkeypatch):
  """COCO with masks, VOC and YOLO, each on the Spark cluster (PROCESS workers) and on the
  default runner. The Spark jobs run one after the other (the first to start would hold both
  workers' cores), beside the default runner's."""
  # the launcher runs with this interpreter; the workers install what the job stages (the
  # project's sdist) in fresh venvs over the worker image (worker.sh)
  monkeypatch.setenv("BEAM_TFRECORD_PYTHON", sys.executable)
  completed = {a.get("id") for a in _master().get("completedapps", [])}
  assert compare_runners.beside_direct(
      inputs, tmp_path, "Spark", lambda args, output: compare_runners.convert_on(
          "spark", args, output, "process", timeout=600), says=[" on spark://"]) == []
  # each conversion was an application of the cluster's master, not a Spark inside the driver
  ran = [a for a in _master().get("completedapps", []) if a.get("id") not in completed]
  assert len(ran) >= len(inputs), ran

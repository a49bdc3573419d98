"""Conversions on a standalone Flink cluster give the DirectRunner's bytes (issue 39).

deploy/engines/convert-on.sh flink runs convert with Beam's FlinkRunner: Beam's Flink job
server on this machine (assembled by setup.sh flink from the Flink runner on Maven Central),
which submits the job to the JobManager of a session cluster of one JobManager and two
TaskManagers, each a JVM of its own (deploy/engines/cluster.sh, Flink from PyPI's
apache-flink-libraries); the TaskManagers start the Python SDK harness in worker processes
(--environment_type=PROCESS, worker.sh), as Dataflow Runner v2 does. Each case converts a small
dataset there and with the default in-process runner, and compares every output file byte for
byte (READMEs and the manifest's times and paths aside).

Marked `engines`; run with
  bash deploy/engines/setup.sh flink        # Flink (PyPI), the job server (Maven Central)
  python -m pytest -m engines tests/engines/test_flink.py
Skipped, with the reason, when setup.sh flink has not made what it needs. A cluster already
running (cluster.sh start flink) is used and left running; else the test starts one and stops
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
FLINK_VERSION = os.environ.get("FLINK_VERSION", "1.19.0")
FLINK_HOME = Path(os.environ.get("FLINK_HOME", CACHE / "flink" / f"flink-{FLINK_VERSION}"))
JOB_SERVER_FOR = CACHE / "flink" / f"job-server-for-{BEAM_VERSION}"
CLUSTER = compare_runners.REPO / "deploy" / "engines" / "cluster.sh"
OVERVIEW = "http://127.0.0.1:8091/overview"


def _missing() -> str:
  absent = []
  if not shutil.which("java"):
    absent.append("java on PATH")
  if not (FLINK_HOME / "bash-java-utils.jar").is_file():
    absent.append(str(FLINK_HOME))
  if not (JOB_SERVER_FOR.is_file() and Path(JOB_SERVER_FOR.read_text().strip()).is_file()):
    absent.append(f"the job server named by {JOB_SERVER_FOR}")
  if not os.access(BOOT, os.X_OK):
    absent.append(str(BOOT))
  return (f"Flink for Beam {BEAM_VERSION} not set up ({', '.join(absent)} missing): run "
          "bash deploy/engines/setup.sh flink" if absent else "")


def _overview() -> dict:
  """The JobManager's overview (its REST API), {} when none answers."""
  try:
    with urllib.request.urlopen(OVERVIEW, timeout=5) as answer:
      return json.load(answer)
  except OSError:
    return {}


@pytest.fixture(scope="module")
def cluster(request):
  """A running cluster: the one there is, else one this test starts (and stops)."""
  compare_runners.skip_unless_selected(
      request, "minutes of Flink jobs; after bash deploy/engines/setup.sh flink")
  if _missing():
    pytest.skip(_missing())
  started = False
  if not _overview():
    start = subprocess.run(["bash", str(CLUSTER), "start", "flink"], capture_output=True,
                           text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-3000:]
    started = True
  try:
    assert _overview().get("taskmanagers", 0) >= 2, _overview()
    yield
  finally:
    if started:
      stop = subprocess.run(["bash", str(CLUSTER), "stop", "flink"], capture_output=True,
                            text=True, timeout=180)
      assert stop.returncode == 0, stop.stderr[-3000:]
      assert not _overview(), "the JobManager still answers after cluster.sh stop flink"


@pytest.fixture(scope="module")
def inputs(cluster, tmp_path_factory):
  return compare_runners.small_sources(tmp_path_factory.mktemp("engines"))


def test_flink_gives_the_direct_runners_bytes(inputs, tmp_path, monkeypatch):
  """COCO with masks, VOC and YOLO, each on the Flink cluster (PROCESS workers) and on the
  default runner; the Flink jobs one after the other, beside the default runner's."""
  monkeypatch.setenv("BEAM_TFRECORD_PYTHON", sys.executable)
  finished = _overview().get("jobs-finished", 0)
  assert compare_runners.beside_direct(
      inputs, tmp_path, "Flink", lambda args, output: compare_runners.convert_on(
          "flink", args, output, "process", timeout=600), says=[" on 127.0.0.1:8091"]) == []
  # each conversion was a job of the cluster's JobManager, finished there
  after = _overview()
  assert after.get("jobs-finished", 0) - finished >= len(inputs), after
  assert after.get("jobs-failed", 0) == 0, after

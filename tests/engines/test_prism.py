"""Conversions on Prism, Beam's portable runner, give the DirectRunner's bytes (issue 39).

Prism runs the Python SDK harness in worker processes of its own over the Fn API
(--environment_type=PROCESS through deploy/engines/convert-on.sh), as Dataflow Runner v2 does:
DoFns, side inputs and coders are pickled, each worker starts with fresh module state, and
the pipeline takes its distributed path (the runner's shuffles, no spill files). Each case
converts a small dataset there and with the default in-process runner, and compares every
output file byte for byte (READMEs and the manifest's times and paths aside).

Marked `engines` and not part of the default suite: skipped unless the marker expression
names `engines`. Run with
  bash deploy/engines/setup.sh      # builds Prism and the Python SDK boot (Go module proxy)
  python -m pytest -m engines tests/engines
Skipped, with the reason, when setup.sh has not built the binaries for this Beam version.
The marker wants one line under `markers =` in pytest.ini (until then pytest warns
PytestUnknownMarkWarning):
    engines: runs a conversion on a portable Beam engine (Prism); select with -m engines
(no conftest.py here: a second module named conftest would shadow the tests' own, which test
modules import by that name.)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_runners  # noqa: E402

pytestmark = pytest.mark.engines

BEAM_VERSION, BOOT = compare_runners.BEAM_VERSION, compare_runners.BOOT
PRISM = Path(os.environ.get("PRISM", compare_runners.CACHE / "prism" / f"v{BEAM_VERSION}" / "prism"))


@pytest.fixture(autouse=True)
def _selected(request):
  compare_runners.skip_unless_selected(
      request, "minutes of Prism start-ups; after bash deploy/engines/setup.sh")


def _missing() -> str:
  absent = [str(p) for p in (PRISM, BOOT) if not os.access(p, os.X_OK)]
  return (f"Prism for Beam {BEAM_VERSION} not built ({', '.join(absent)} missing): run "
          "bash deploy/engines/setup.sh" if absent else "")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  """{name: convert arguments} of one small generated dataset in three formats."""
  if _missing():
    pytest.skip(_missing())
  return compare_runners.small_sources(tmp_path_factory.mktemp("engines"))


def test_prism_gives_the_direct_runners_bytes(inputs, tmp_path, monkeypatch):
  """COCO with masks, VOC and YOLO, each on Prism (PROCESS workers) and on the default runner.
  The Prism jobs run one after the other, beside the default runner's: each worker first
  pip-installs the staged project (tensorflow among it), and Prism fails a job whose worker
  has not connected within one minute (hard-coded in Prism 2.77), which three installs at once
  on a 2-core machine overran."""
  # the launcher runs with this interpreter; the workers install what the job stages (the
  # project's sdist) in fresh venvs over the worker image (worker.sh)
  monkeypatch.setenv("BEAM_TFRECORD_PYTHON", sys.executable)
  monkeypatch.setenv("PRISM", str(PRISM))
  monkeypatch.setenv("BEAM_BOOT", str(BOOT))
  assert compare_runners.beside_direct(
      inputs, tmp_path, "Prism", lambda args, output: compare_runners.convert_prism(
          args, output, "process", timeout=300)) == []

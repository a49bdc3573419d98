"""gs:// on a portable engine (issue 39, item 3): the sources, the images, the output and Beam's
scratch space (--temp_location) in a Cloud Storage emulator, the conversion on Prism, and on a
Spark cluster (one there is, else one the test starts and stops), with PROCESS workers, which
reach the emulator only through the address convert-on.sh passes them (nothing of the
launcher's disk). Its output equals the DirectRunner's conversion of the same gs://
sources byte for byte (READMEs and the manifest's times and paths aside), and `verify` passes
on a copy.

Marked `engines` (python -m pytest -m engines tests/engines/test_gcs_on_engines.py), after
bash deploy/engines/setup.sh; skipped otherwise, with the reason.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import compare_runners  # noqa: E402
import gcs_emulator  # noqa: E402
import test_spark  # noqa: E402  (its cluster helpers)

pytestmark = pytest.mark.engines
pytest.importorskip("gcp_storage_emulator")

BUCKET = "tfr-engines"
PRISM = Path(os.environ.get("PRISM", compare_runners.CACHE / "prism" /
                            f"v{compare_runners.BEAM_VERSION}" / "prism"))


@pytest.fixture(params=["prism", "spark"])
def engine(request):
  """The engine, set up and (Spark) with a cluster running while the test runs."""
  compare_runners.skip_unless_selected(
      request, "conversions on gs:// on Prism and Spark; after bash deploy/engines/setup.sh")
  if request.param == "prism":
    absent = [str(p) for p in (PRISM, compare_runners.BOOT) if not os.access(p, os.X_OK)]
    if absent:
      pytest.skip(f"Prism for Beam {compare_runners.BEAM_VERSION} not built "
                  f"({', '.join(absent)} missing): run bash deploy/engines/setup.sh")
    yield "prism"
    return
  if test_spark._missing():
    pytest.skip(test_spark._missing())
  started = not test_spark._master()
  if started:
    start = subprocess.run(["bash", str(test_spark.CLUSTER), "start", "spark"],
                           capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-3000:]
  try:
    yield "spark"
  finally:
    if started:
      stop = subprocess.run(["bash", str(test_spark.CLUSTER), "stop", "spark"],
                            capture_output=True, text=True, timeout=180)
      assert stop.returncode == 0, stop.stderr[-3000:]


def _upload(local: Path, remote: str) -> None:
  from apache_beam.io.filesystems import FileSystems
  for path in sorted(local.rglob("*")):
    if path.is_file():
      with FileSystems.create(f"{remote}/{path.relative_to(local).as_posix()}") as f:
        f.write(path.read_bytes())


def _download(remote: str, local: Path) -> int:
  """Every object under `remote`/ into `local`; how many."""
  from apache_beam.io.filesystems import FileSystems
  found = FileSystems.match([f"{remote}/**"])[0].metadata_list
  for meta in found:
    target = local / meta.path[len(remote) + 1:]
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileSystems.open(meta.path, compression_type="uncompressed") as f:
      target.write_bytes(f.read())
  return len(found)


def test_an_engine_converts_from_and_to_gs_as_the_direct_runner_does(engine, tmp_path,
                                                                   monkeypatch):
  import conftest  # noqa: E402  (tests/)
  ds = conftest.make_dataset(tmp_path / "data", count=8, seed=5)
  with gcs_emulator.running(BUCKET):
    data = f"gs://{BUCKET}/data"
    _upload(ds.root, data)
    args = ["--format=coco", *(f"--input={s}={data}/{ds.coco_file(s).name}" for s in ds.splits),
            f"--images={data}/images", "--num-shards=2"]
    monkeypatch.setenv("BEAM_TFRECORD_PYTHON", sys.executable)
    monkeypatch.setenv("PRISM", str(PRISM))
    monkeypatch.setenv("BEAM_BOOT", str(compare_runners.BOOT))
    out = {"direct": f"gs://{BUCKET}/out-direct", engine: f"gs://{BUCKET}/out-{engine}"}
    direct = subprocess.run(
        [compare_runners.python(), "-m", "beam_tfrecord.cli", "convert", *args,
         f"--output={out['direct']}"], cwd=compare_runners.REPO,
        env=compare_runners.environment(compare_runners.REPO), capture_output=True, text=True,
        timeout=300)
    assert direct.returncode == 0, direct.stderr[-3000:]
    done = subprocess.run(
        ["bash", str(compare_runners.CONVERT_ON), engine, "--env", "process", "--", *args,
         f"--output={out[engine]}", f"--temp_location=gs://{BUCKET}/scratch"],
        cwd=compare_runners.REPO, env=compare_runners.environment(compare_runners.REPO),
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]
    assert f"(Beam {compare_runners.BEAM_VERSION}, process)" in done.stderr
    counts = {name: _download(uri, tmp_path / name) for name, uri in out.items()}
  assert counts[engine] == counts["direct"] > 0
  # verify reads shards with TensorFlow, whose gs:// does not know the emulator: a copy
  assert compare_runners.verify(tmp_path / engine) == []
  shards = sorted((tmp_path / engine).rglob("*.tfrecord"))
  assert len(shards) == 2 * len(ds.splits) and all(p.stat().st_size > 0 for p in shards)
  assert compare_runners.differences(tmp_path / "direct", tmp_path / engine) == []

"""deploy/cron/beam-tfrecord-cron.sh: versions, LATEST, --if-changed skips, kills, overlap."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beam_tfrecord import sample

REPO = Path(__file__).resolve().parents[2]  # the repository: tests/deploy/ is two below
WRAPPER = REPO / "deploy" / "cron" / "beam-tfrecord-cron.sh"

pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")

# A conversion that reads each image slowly, so that a test can catch it mid-run.
SLOW_TOOL = """\
import os, sys, time
from beam_tfrecord.write import encode
_read = encode.read_bytes
def read_bytes(uri, *a, **k):
  with open(os.environ["SLOW_MARK"], "a") as f:
    f.write(uri + "\\n")
  time.sleep(float(os.environ.get("SLOW_SECONDS", "0")))
  return _read(uri, *a, **k)
encode.read_bytes = read_bytes
from beam_tfrecord.cli import main
sys.exit(main())
"""


@pytest.fixture
def setup(tmp_path):
  data = tmp_path / "data"
  sample.make_dataset(str(data), count=6)
  tool = tmp_path / "tool.py"
  tool.write_text(SLOW_TOOL)
  dest = tmp_path / "dest"
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             BEAM_TFRECORD=f"{sys.executable} {tool}", SLOW_MARK=str(tmp_path / "reading"))
  args = ["--dest", str(dest), "--keep", "2", "--", "--format", "csv",
          "--input", f"train={data}/train_labels.csv", "--input", f"val={data}/val_labels.csv",
          "--images", f"{data}/images", "--num-shards", "1", "--runner=FnApiRunner"]
  return data, dest, env, args, tmp_path / "reading"


def start(env, args, **kw):
  return subprocess.Popen(["bash", str(WRAPPER), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def wrapper(env, args, timeout=180):
  proc = start(env, args)
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, err


def versions(dest: Path):
  return sorted(p.name for p in (dest / "versions").iterdir())


def latest(dest: Path):
  return os.readlink(dest / "LATEST") if (dest / "LATEST").is_symlink() else None


def touch_new_image(data: Path, name: str):
  first = sorted((data / "images").iterdir())[0]
  (data / "images" / name).write_bytes(first.read_bytes())


def test_versions_skips_kills_and_failures(setup):
  """One history, in order: publish, skip, a killed run, a new version replacing the old
  (--keep 1), a failing run."""
  data, dest, env, args, reading = setup
  # --keep 1; --full: a changed source is read again whole (incremental runs read only what
  # changed, test_versions_share_unchanged_shards), so the kill below finds it reading
  args = ["--full"] + [a if a != "2" else "1" for a in args]
  code, err = wrapper(env, args)
  assert code == 0, err + (dest / "logs" / "cron.log").read_text()
  first = versions(dest)
  assert len(first) == 1 and latest(dest) == f"versions/{first[0]}"
  manifest = json.loads((dest / "LATEST" / "manifest.json").read_text())
  assert manifest["status"] == "ok" and manifest["source_fingerprint"]["files"] > 0
  assert manifest["totals"]["examples"] == 6

  # Nothing changed: skipped, nothing new.
  code, err = wrapper(env, args)
  assert code == 0 and "skipped" in err, err
  assert versions(dest) == first and latest(dest) == f"versions/{first[0]}"

  # The source changes; the run that would publish it is killed while reading images.
  touch_new_image(data, "new_1.jpg")
  reading.unlink()
  proc = start(dict(env, SLOW_SECONDS="1"), args)
  deadline = time.monotonic() + 120
  while not reading.exists() and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  assert reading.exists(), "the conversion never started reading images"
  proc.send_signal(signal.SIGTERM)  # as cron's or a person's kill would
  out, err = proc.communicate(timeout=60)
  assert proc.returncode != 0 and "interrupted" in err, err
  assert latest(dest) == f"versions/{first[0]}"
  assert versions(dest) == first  # no new version, no .inprogress left behind

  # The next run publishes the change; with --keep 1 the old version goes.
  code, err = wrapper(env, args)
  assert code == 0, err
  second = versions(dest)
  assert len(second) == 1 and second != first and latest(dest) == f"versions/{second[0]}"
  assert json.loads((dest / "LATEST" / "manifest.json").read_text())["totals"]["examples"] == 6
  log = (dest / "logs" / "cron.log").read_text()
  assert "skipped" in log and "removing old version" in log and "interrupted" in log
  assert "verify: 6 examples parsed with TensorFlow: OK" in log

  # A failing conversion: non-zero, LATEST and the versions untouched.
  touch_new_image(data, "new_2.jpg")
  code, err = wrapper(env, args + ["--num-shards", "0"])
  assert code != 0 and "convert failed" in err, err
  assert versions(dest) == second and latest(dest) == f"versions/{second[0]}"


def test_overlap_and_a_hard_kill(setup):
  """A second run while one is going exits with 'already running'; a run killed with SIGKILL
  (no trap) leaves only a hidden .inprogress directory, which the next run removes."""
  data, dest, env, args, reading = setup
  first = start(dict(env, SLOW_SECONDS="0.5"), args)
  deadline = time.monotonic() + 120
  while not reading.exists() and first.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  assert reading.exists()
  second = start(env, args)
  out2, err2 = second.communicate(timeout=60)
  assert second.returncode == 0 and "already running" in err2, err2

  os.killpg(first.pid, signal.SIGKILL)  # wrapper and conversion, no trap runs
  first.communicate(timeout=30)
  deadline = time.monotonic() + 30  # the killed conversion lets go of the lock as it exits
  while subprocess.run(["flock", "-n", str(dest / ".lock"), "true"]).returncode != 0:
    assert time.monotonic() < deadline, "lock still held after SIGKILL"
    time.sleep(0.1)
  left = versions(dest)
  assert left and all(n.startswith(".inprogress-") for n in left), left
  assert latest(dest) is None
  assert not (dest / "versions" / left[0] / "manifest.json").exists()

  code, err = wrapper(env, args)
  assert code == 0, err
  assert "removing the unfinished run" in err
  assert [n for n in versions(dest) if n.startswith(".")] == []
  assert latest(dest) is not None and (dest / "LATEST" / "manifest.json").exists()


def test_an_edited_manifest_or_latest_deletes_nothing_outside(setup, tmp_path):
  """A reproduced failure: a manifest in LATEST edited to list '../' and absolute names made
  the next run (sources changed) delete those files, and the wrapper logged 'done'. Now the
  conversion refuses it (exit 2), the wrapper publishes nothing, and a LATEST pointing out of
  DEST/versions is refused before anything runs."""
  data, dest, env, args, _ = setup
  code, err = wrapper(env, args)
  assert code == 0, err
  published = versions(dest)
  victims = [tmp_path / "victim-relative", tmp_path / "victim-absolute"]
  for victim in victims:
    victim.write_bytes(b"not the tool's")
  manifest_path = dest / "LATEST" / "manifest.json"
  manifest = json.loads(manifest_path.read_text())
  # the run's output is DEST/versions/.inprogress-VERSION: three levels below tmp_path
  manifest["files"] += [f"../../../{victims[0].name}", str(victims[1])]
  manifest_path.write_text(json.dumps(manifest))
  touch_new_image(data, "new_1.jpg")
  code, err = wrapper(env, args)
  log = (dest / "logs" / "cron.log").read_text()
  assert code == 2 and "convert failed with status 2" in err, err
  assert "plain names" in log and "Nothing was deleted" in log
  assert all(v.read_bytes() == b"not the tool's" for v in victims)
  assert versions(dest) == published and latest(dest) == f"versions/{published[0]}"
  assert log.count(": done, LATEST") == 1  # the first run only

  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (elsewhere / "manifest.json").write_text(json.dumps(manifest))
  os.unlink(dest / "LATEST")
  os.symlink("../elsewhere", dest / "LATEST")
  code, err = wrapper(env, args)
  assert code == 1 and "LATEST points to ../elsewhere" in err, err
  assert versions(dest) == published and os.readlink(dest / "LATEST") == "../elsewhere"
  assert all(v.exists() for v in victims) and sorted(os.listdir(elsewhere)) == ["manifest.json"]


def test_versions_share_unchanged_shards(setup):
  """Incremental by default: the second version encodes only the changed image; the split it
  does not touch is LATEST's file itself (a hard link), and the version equals a --full one."""
  data, dest, env, args, reading = setup
  code, err = wrapper(env, args)
  assert code == 0, err
  first = dest / "versions" / versions(dest)[0]
  manifest = json.loads((first / "manifest.json").read_text())
  assert manifest["incremental"]["reason"] == "no earlier output"
  # one training image drawn again: train's shard is rewritten, val's kept
  rows = (data / "train_labels.csv").read_text().splitlines()[1:]
  name = next(r.split(",")[0] for r in rows if r.split(",")[3])
  image = data / "images" / name
  from PIL import Image
  with Image.open(image) as im:
    im.load()
    kind = im.format
    im.rotate(180).save(image, format=kind)
  code, err = wrapper(env, args)
  assert code == 0, err
  second = dest / "LATEST"
  assert second.resolve() != first.resolve()
  summary = json.loads((second / "manifest.json").read_text())["incremental"]
  assert summary["mode"] == "incremental" and summary["images"]["changed"] == 1
  assert summary["shards"] == {"total": 2, "rewritten": 1, "kept": 1}
  val = "val-00000-of-00001.tfrecord"
  train = "train-00000-of-00001.tfrecord"
  assert os.stat(second / val).st_ino == os.stat(first / val).st_ino
  assert os.stat(second / train).st_ino != os.stat(first / train).st_ino
  assert "--incremental --plan-from" in (dest / "logs" / "cron.log").read_text()
  # nothing changed since: skipped, although --plan-from now names the version before
  code, err = wrapper(env, args)
  assert code == 0 and "skipped" in err, err
  # the same sources converted in full give the same files
  code, err = wrapper(env, ["--full", "--force", *args])
  assert code == 0, err
  full = dest / "LATEST"
  names = sorted(p.name for p in full.iterdir() if p.name.endswith(".tfrecord"))
  assert names == [train, val]
  assert all((full / n).read_bytes() == (second / n).read_bytes() for n in names)

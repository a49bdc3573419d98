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

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "deploy" / "cron" / "beam-tfrecord-cron.sh"

pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")

# A conversion that reads each image slowly, so that a test can catch it mid-run.
SLOW_TOOL = """\
import os, sys, time
import beam_tfrecord.encode as encode
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


def test_runs_skip_and_publish_new_versions(setup):
  data, dest, env, args, _ = setup
  code, err = wrapper(env, args)
  assert code == 0, err + (dest / "logs" / "cron.log").read_text()
  first = versions(dest)
  assert len(first) == 1 and latest(dest) == f"versions/{first[0]}"
  manifest = json.loads((dest / "LATEST" / "manifest.json").read_text())
  assert manifest["status"] == "ok" and manifest["source_fingerprint"]["files"] > 0
  assert manifest["totals"]["examples"] == 6

  code, err = wrapper(env, args)  # nothing changed
  assert code == 0 and "skipped" in err
  assert versions(dest) == first and latest(dest) == f"versions/{first[0]}"

  touch_new_image(data, "new_1.jpg")  # the source changed: a new version
  code, err = wrapper(env, args)
  assert code == 0, err
  second = versions(dest)
  assert len(second) == 2 and latest(dest) == f"versions/{second[-1]}" != f"versions/{first[0]}"

  touch_new_image(data, "new_2.jpg")  # and again: only --keep 2 versions remain
  code, err = wrapper(env, args)
  assert code == 0, err
  third = versions(dest)
  assert len(third) == 2 and first[0] not in third and latest(dest) == f"versions/{third[-1]}"
  log = (dest / "logs" / "cron.log").read_text()
  assert "skipped" in log and "removing old version" in log
  assert "verify: " in log  # the verify step ran and logged its result


def test_killed_run_leaves_latest_and_nothing_complete_looking(setup):
  data, dest, env, args, reading = setup
  assert wrapper(env, args)[0] == 0
  before_versions, before_latest = versions(dest), latest(dest)
  touch_new_image(data, "new.jpg")
  proc = start(dict(env, SLOW_SECONDS="1"), args)
  deadline = time.monotonic() + 120
  while not reading.exists() and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  assert reading.exists(), "the conversion never started reading images"
  proc.send_signal(signal.SIGTERM)  # as cron's or a person's kill would
  out, err = proc.communicate(timeout=60)
  assert proc.returncode != 0
  assert "interrupted" in err
  assert latest(dest) == before_latest
  assert versions(dest) == before_versions  # no new version, no .inprogress left
  # The lock is free again and the next run publishes the change.
  code, err = wrapper(env, args)
  assert code == 0, err
  assert len(versions(dest)) == 2 and latest(dest) != before_latest


def test_killed_hard_run_is_cleaned_by_the_next(setup):
  data, dest, env, args, reading = setup
  proc = start(dict(env, SLOW_SECONDS="0.3"), args)
  while not reading.exists() and proc.poll() is None:
    time.sleep(0.05)
  os.killpg(proc.pid, signal.SIGKILL)  # wrapper and conversion gone, no trap ran
  proc.communicate(timeout=30)
  left = versions(dest)
  assert left and all(n.startswith(".inprogress-") for n in left), left
  assert latest(dest) is None
  assert not (dest / "versions" / left[0] / "manifest.json").exists()
  code, err = wrapper(env, args)
  assert code == 0, err
  assert "removing the unfinished run" in err
  assert [n for n in versions(dest) if n.startswith(".")] == []
  assert latest(dest) is not None


def test_two_at_once_do_not_overlap(setup):
  data, dest, env, args, reading = setup
  slow = dict(env, SLOW_SECONDS="0.2")
  first = start(slow, args)
  while not reading.exists() and first.poll() is None:
    time.sleep(0.05)
  second = start(slow, args)
  out2, err2 = second.communicate(timeout=60)
  out1, err1 = first.communicate(timeout=180)
  assert second.returncode == 0 and "already running" in err2
  assert first.returncode == 0, err1
  assert len(versions(dest)) == 1


def test_failed_conversion_exits_non_zero_and_keeps_latest(setup):
  data, dest, env, args, _ = setup
  assert wrapper(env, args)[0] == 0
  before = latest(dest)
  (data / "train_labels.csv").write_text("not,a,valid\ncsv")
  code, err = wrapper(env, args + ["--strict"])
  assert code != 0 and "failed" in err
  assert latest(dest) == before and len(versions(dest)) == 1

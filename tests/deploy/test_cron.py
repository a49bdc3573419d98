"""deploy/cron/beam-tfrecord-cron.sh: one `convert --append` per run (the tool's versions and
LATEST file), skips, kills, overlap, the refused options and the move from the earlier
wrapper's dated versions and LATEST symlink. The real wrapper runs the real tool on tiny
generated datasets."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from versioned_outputs import in_process

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


def make_setup(tmp_path: Path, count: int):
  data = tmp_path / "data"
  sample.make_dataset(str(data), count=count)
  tool = tmp_path / "tool.py"
  tool.write_text(SLOW_TOOL)
  dest = tmp_path / "dest"
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             BEAM_TFRECORD=f"{sys.executable} {tool}", SLOW_MARK=str(tmp_path / "reading"))
  # retention 0: these runs follow each other in seconds, not nights
  args = ["--dest", str(dest), "--keep", "2", "--retain-hours", "0", "--",
          *convert_options(data)]
  return data, dest, env, args, tmp_path / "reading"


@pytest.fixture
def setup(tmp_path):
  return make_setup(tmp_path, 6)


def convert_options(data: Path):
  return ["--format", "csv", "--input", f"train={data}/train_labels.csv",
          "--input", f"val={data}/val_labels.csv", "--images", f"{data}/images",
          "--num-shards", "1", "--runner=FnApiRunner"]


def start(env, args, **kw):
  return subprocess.Popen(["bash", str(WRAPPER), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def wrapper(env, args, timeout=180):
  proc = start(env, args)
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, err


def cron_log(dest: Path) -> str:
  return (dest / "logs" / "cron.log").read_text()


def numbered(dest: Path):
  """The tool's versions: DEST/versions/<8 digits>."""
  root = dest / "versions"
  return sorted(p.name for p in root.iterdir() if re.fullmatch(r"\d{8}", p.name)) \
      if root.is_dir() else []


def latest(dest: Path):
  """What DEST/LATEST names: a regular one-line file (never a symlink), or None."""
  path = dest / "LATEST"
  if not os.path.lexists(path):
    return None
  assert not path.is_symlink() and path.is_file(), "LATEST is not a regular file"
  text = path.read_text()
  assert re.fullmatch(r"versions/\d{8}\n", text), repr(text)
  return text.strip()


def manifest(version: Path):
  return json.loads((version / "manifest.json").read_text())


def wait_for(reading: Path, proc, seconds=120):
  deadline = time.monotonic() + seconds
  while not reading.exists() and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  assert reading.exists(), "the conversion never started reading images"


def add_image(data: Path, stem: str):
  """A new training image (a copy of the first one with boxes) with one box: a real source
  change (an image file no annotation names would not be one)."""
  row = next(r for r in (data / "train_labels.csv").read_text().splitlines()[1:]
             if r.split(",")[3])
  source, *fields = row.split(",")
  name = stem + os.path.splitext(source)[1]
  shutil.copyfile(data / "images" / source, data / "images" / name)
  with open(data / "train_labels.csv", "a") as f:
    f.write(",".join([name, *fields]) + "\n")


def verify(dest: Path) -> str:
  """`beam-tfrecord verify DEST`, in this process: it reads what the wrapper's processes left
  (no interpreter and TensorFlow start-up per call)."""
  done = in_process(["verify", str(dest)])
  assert done.returncode == 0, done.stdout + done.stderr
  return done.stdout + done.stderr


def records(path: Path):
  """The records of one TFRecord file (length, crc, data, crc framing), as bytes."""
  out, raw, at = [], path.read_bytes(), 0
  while at < len(raw):
    (length,) = struct.unpack("<Q", raw[at:at + 8])
    out.append(raw[at + 12:at + 12 + length])
    at += 12 + length + 4
  return out


def shards(version: Path, split: str):
  return [s["path"] for s in manifest(version)["splits"][split]["shards"]]


def inodes(version: Path, split: str):
  return {os.stat(version / name).st_ino for name in shards(version, split)}


def split_records(version: Path, split: str):
  return sorted(r for name in shards(version, split) for r in records(version / name))


def test_versions_skips_kills_and_failures(setup):
  """One history, in order: publish, skip, a killed run, a new version replacing the old
  (--keep 1), a failing run."""
  data, dest, env, args, reading = setup
  args = [a if a != "2" else "1" for a in args]  # --keep 1
  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  assert latest(dest) == "versions/00000001" and numbered(dest) == ["00000001"]
  first = manifest(dest / "versions" / "00000001")
  assert first["status"] == "ok" and first["totals"]["examples"] == 6
  assert "done, LATEST is versions/00000001" in err
  assert "OK" in verify(dest)  # readers given DEST read LATEST's version

  # Nothing changed: skipped, nothing new.
  code, err = wrapper(env, args)
  assert code == 0 and "skipped" in err, err
  assert "unchanged:" in cron_log(dest)
  assert numbered(dest) == ["00000001"] and latest(dest) == "versions/00000001"

  # The source changes; the run that would publish it is killed while reading the new image.
  add_image(data, "new_1")
  reading.unlink(missing_ok=True)
  proc = start(dict(env, SLOW_SECONDS="2"), args)
  wait_for(reading, proc)
  proc.send_signal(signal.SIGTERM)  # as cron's or a person's kill would
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 130 and "interrupted by SIGTERM" in err, err
  assert "LATEST is versions/00000001" in err
  assert latest(dest) == "versions/00000001"
  assert manifest(dest / "versions" / "00000001")["totals"]["examples"] == 6

  # The next run publishes the change; with --keep 1 the old version goes.
  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  now = latest(dest)
  assert now is not None and now > "versions/00000001" and numbered(dest) == [now[9:]]
  assert manifest(dest / now)["totals"]["examples"] == 7
  assert f"done, LATEST is {now}" in err
  assert "OK" in verify(dest)
  log = cron_log(dest)
  assert "skipped" in log and "interrupted" in log
  assert "--append --output" in log and "--keep 1" in log and "--compact" not in log
  assert not [n for n in os.listdir(dest) if n.startswith(".beam-tfrecord-run")]

  # A failing conversion: non-zero, LATEST and the versions untouched.
  add_image(data, "new_2")
  code, err = wrapper(env, args + ["--num-shards", "0"])
  assert code != 0 and "convert failed with status" in err, err
  assert f"LATEST is {now}" in err
  assert latest(dest) == now and numbered(dest) == [now[9:]]


def test_overlap_a_manual_run_and_a_hard_kill(setup, tmp_path):
  """A second wrapper run while one is going exits 0 with 'already running'; so does one that
  finds DEST locked by a live conversion started by hand. A run killed with SIGKILL (no trap)
  publishes nothing, and the next run publishes the first version."""
  data, dest, env, args, reading = setup
  first = start(dict(env, SLOW_SECONDS="0.5"), args)
  wait_for(reading, first)
  second = start(env, args)
  out2, err2 = second.communicate(timeout=60)
  assert second.returncode == 0 and "already running" in err2, err2

  os.killpg(first.pid, signal.SIGKILL)  # wrapper and conversion, no trap runs
  first.communicate(timeout=30)
  deadline = time.monotonic() + 30  # the killed conversion lets go of the lock as it exits
  while subprocess.run(["flock", "-n", str(dest / ".lock"), "true"]).returncode != 0:
    assert time.monotonic() < deadline, "lock still held after SIGKILL"
    time.sleep(0.1)
  assert latest(dest) is None and numbered(dest) == []

  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  assert latest(dest) == "versions/00000001"
  assert manifest(dest / "versions" / "00000001")["totals"]["examples"] == 6
  assert not [n for n in os.listdir(dest) if n.startswith(".beam-tfrecord-run")]

  # A conversion started by hand (not through the wrapper, so no flock) holds DEST: the
  # wrapper's conversion finds it locked, and the wrapper counts that as already running.
  add_image(data, "new_1")
  reading.unlink(missing_ok=True)
  manual = subprocess.Popen(
      [*env["BEAM_TFRECORD"].split(), "convert", *convert_options(data), "--append",
       "--output", str(dest)], env=dict(env, SLOW_SECONDS="3"), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    wait_for(reading, manual)
    code, err = wrapper(env, args)
    assert code == 0 and "already running" in err and "locked" in cron_log(dest), err
  finally:
    out, merr = manual.communicate(timeout=120)
  assert manual.returncode == 0, merr
  assert latest(dest) == "versions/00000002"


def test_versions_share_unchanged_shards(tmp_path):
  """An added image goes into a new (delta) shard, a changed one rewrites its shard, every
  other shard is the earlier version's file itself (a hard link); --full (and --force, its old
  name) passes --compact: a full version with the same records and no delta shards. 40 images,
  so that one added image stays under the tool's 10% delta threshold."""
  data, dest, env, args, reading = make_setup(tmp_path, 40)
  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  v1 = dest / "versions" / "00000001"
  train, val = "train-00000-of-00001.tfrecord", "val-00000-of-00001.tfrecord"
  assert shards(v1, "train") == [train] and shards(v1, "val") == [val]
  examples = manifest(v1)["totals"]["examples"]

  add_image(data, "new_1")
  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  assert latest(dest) == "versions/00000002"
  v2 = dest / "versions" / "00000002"
  summary = manifest(v2)["incremental"]
  assert summary["mode"] == "append" and summary["images"]["added"] == 1, summary
  # v1's shards are v2's files (hard links; renumbered names), plus one delta shard
  assert inodes(v1, "train") < inodes(v2, "train") and inodes(v2, "val") == inodes(v1, "val")
  (delta,) = [n for n in shards(v2, "train") if os.stat(v2 / n).st_ino not in inodes(v1, "train")]
  assert len(records(v2 / delta)) == 1 and len(shards(v2, "train")) == 2
  assert manifest(v2)["totals"]["examples"] == examples + 1
  assert split_records(v2, "val") == split_records(v1, "val")
  v1_train = inodes(v1, "train")  # v1 goes with the next version (--keep 2)

  # One training image drawn again: the shard holding it is rewritten, the others are kept.
  rows = (data / "train_labels.csv").read_text().splitlines()[1:]
  name = next(r.split(",")[0] for r in rows if r.split(",")[3] and r.startswith("img_"))
  image = data / "images" / name
  from PIL import Image
  with Image.open(image) as im:
    im.load()
    kind = im.format
    im.rotate(180).save(image, format=kind)
  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  assert latest(dest) == "versions/00000003"
  v3 = dest / "versions" / "00000003"
  assert inodes(v3, "val") == inodes(v2, "val")
  assert os.stat(v2 / delta).st_ino in inodes(v3, "train")  # the delta shard, kept
  assert not v1_train & inodes(v3, "train")  # the shard holding the image, rewritten
  assert split_records(v3, "train") != split_records(v2, "train")
  assert len(split_records(v3, "train")) == len(split_records(v2, "train"))
  assert numbered(dest) == ["00000002", "00000003"]  # --keep 2
  assert inodes(v3, "val") == inodes(v2, "val")  # still there after v1 was deleted

  # Nothing changed since: skipped.
  code, err = wrapper(env, args)
  assert code == 0 and "skipped" in err, err

  # --force is --full is --compact: a full version, the same records, no delta shards.
  # (A version needs a change: one more image.)
  add_image(data, "new_2")
  code, err = wrapper(env, ["--force", *args])
  assert code == 0, err + cron_log(dest)
  assert "--compact" in next(line for line in reversed(cron_log(dest).splitlines())
                             if " run: " in line)
  assert latest(dest) == "versions/00000004"
  full = dest / "versions" / "00000004"
  assert shards(full, "train") == [train] and shards(full, "val") == [val]
  assert len(split_records(full, "train")) == len(split_records(v3, "train")) + 1
  assert set(split_records(v3, "train")) < set(split_records(full, "train"))
  assert split_records(full, "val") == split_records(v3, "val")
  assert "OK" in verify(dest)


def test_the_wrapper_refuses_what_it_sets(tmp_path):
  """--output, --append, --keep, ... among the convert options (abbreviated too) are refused
  before anything is made."""
  dest = tmp_path / "dest"
  for bad in (["--output", "x"], ["--output=x"], ["--out", "x"], ["--overwrite"],
              ["--append"], ["--keep", "3"], ["--keep=3"], ["--retain-hours", "1"],
              ["--if-changed"]):
    proc = subprocess.run(["bash", str(WRAPPER), "--dest", str(dest), "--", "--format", "csv",
                           *bad], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "is set by the wrapper" in proc.stderr, (bad, proc.stderr)
  assert not dest.exists()
  proc = subprocess.run(["bash", str(WRAPPER), "--dest", "gs://demo-bucket/x", "--", "-x"],
                        capture_output=True, text=True, timeout=30)
  assert proc.returncode == 2 and "must be a local directory" in proc.stderr, proc.stderr
  proc = subprocess.run(["bash", str(WRAPPER), "--dest", str(dest), "--keep", "0", "--", "-x"],
                        capture_output=True, text=True, timeout=30)
  assert proc.returncode == 2 and "--keep must be a positive number" in proc.stderr


def snapshot(root: Path):
  """Every path below root with its type, size, inode and modification time."""
  out = {}
  for d, dirs, files in os.walk(root):
    for n in dirs + files:
      p = os.path.join(d, n)
      s = os.lstat(p)
      out[os.path.relpath(p, root)] = (s.st_mode, s.st_size, s.st_ino, s.st_mtime_ns)
  return out


def test_takes_over_a_dest_of_the_earlier_wrapper(setup):
  """A DEST made by the earlier wrapper: dated versions, LATEST a symlink to one of them, an
  unfinished .inprogress run. The wrapper removes the symlink (never follows it) and the
  leftover, says so once, converts in full to versions/00000001, and leaves the dated
  versions as they were."""
  data, dest, env, args, _ = setup
  dated = dest / "versions" / "20260101T030000Z"
  dated.mkdir(parents=True)
  # the earlier wrapper's version: a plain conversion, in this process
  done = in_process(["convert", *convert_options(data), "--output", str(dated)])
  assert done.returncode == 0, done.stderr
  (dest / "versions" / "20251231T030000Z").mkdir()
  (dest / "versions" / "20251231T030000Z" / "manifest.json").write_text("{}")
  leftover = dest / "versions" / ".inprogress-20260102T030000Z"
  leftover.mkdir()
  (leftover / "train-00000-of-00001.tfrecord").write_bytes(b"half")
  os.symlink("versions/20260101T030000Z", dest / "LATEST")
  (dest / "logs").mkdir()
  (dest / "logs" / "cron.log").write_text("2026-01-01T03:00:00Z [1] done, LATEST -> ...\n")
  (dest / ".lock").touch()
  before = snapshot(dated)

  code, err = wrapper(env, args)
  assert code == 0, err + cron_log(dest)
  assert latest(dest) == "versions/00000001"  # a file now
  assert manifest(dest / "versions" / "00000001")["totals"]["examples"] == 6
  assert snapshot(dated) == before  # the dated versions are left as they were
  assert (dest / "versions" / "20251231T030000Z" / "manifest.json").read_text() == "{}"
  assert not leftover.exists()
  moved = [line for line in err.splitlines() if "LATEST symlink" in line]
  assert len(moved) == 1, err
  assert "versions/20260101T030000Z" in moved[0] and "full conversion" in moved[0]
  assert "left for you to delete" in moved[0]
  assert "OK" in verify(dest)

  # Taken over once: the next run (unchanged) says nothing of it, and --keep 2 never counts
  # the dated versions.
  code, err = wrapper(env, args)
  assert code == 0 and "skipped" in err and "LATEST symlink" not in err, err
  for n in range(2):
    add_image(data, f"new_{n}")
    code, err = wrapper(env, args)
    assert code == 0, err + cron_log(dest)
  assert numbered(dest) == ["00000002", "00000003"] and latest(dest) == "versions/00000003"
  assert snapshot(dated) == before
  assert cron_log(dest).count("LATEST symlink") == 1


def test_a_latest_symlink_of_someone_else_is_refused(setup, tmp_path):
  """A LATEST symlink that is not the earlier wrapper's versions/<date>: refused before
  anything runs, nothing changed, the link neither followed nor removed."""
  data, dest, env, args, _ = setup
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (elsewhere / "manifest.json").write_text('{"tool": "beam-tfrecord"}')
  dest.mkdir()
  for target in ("../elsewhere", "versions/../../elsewhere", str(elsewhere)):
    os.symlink(target, dest / "LATEST")
    code, err = wrapper(env, args)
    assert code == 1 and f"LATEST is a symlink to {target}" in err, err
    assert os.readlink(dest / "LATEST") == target
    assert sorted(os.listdir(elsewhere)) == ["manifest.json"]
    assert numbered(dest) == [] and "run:" not in cron_log(dest)
    os.unlink(dest / "LATEST")

"""Issue 38: an --append reads only the images that were added or changed. The sort compares
each image's file stamp and annotation digest with the earlier version's catalog (no image
opened), and only the added and changed go on to be read and encoded. Checked with strace
(-f: the launcher, the sort's and the writers' processes; where it is installed), and with
Python's `open` audit event in this process (--writer-processes 1: every image read is this
process's)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from versioned_outputs import dataset, full, in_process, latest, records, run

pytestmark = pytest.mark.e2e


def _opened_by_strace(cmd, log: Path):
  done = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat", "-o", str(log),
                         *cmd], capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout + done.stderr
  opened = []
  for line in log.read_text(errors="replace").splitlines():
    if "open" in line and '"' in line and "= -1" not in line:
      opened.append(line.split('"')[1])
  return done, opened


def _strace_works() -> bool:
  if not shutil.which("strace"):
    return False
  probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", "/dev/null",
                          "true"], capture_output=True, timeout=60)
  return probe.returncode == 0


_AUDIT = {"on": False, "paths": []}


def _audit(event, args):
  if _AUDIT["on"] and event == "open" and isinstance(args[0], str):
    _AUDIT["paths"].append(args[0])


def _opened_in_process(cmd):
  if not _AUDIT.get("hooked"):
    sys.addaudithook(_audit)
    _AUDIT["hooked"] = True
  _AUDIT.update(on=True, paths=[])
  try:
    done = in_process(cmd[3:] + ["--writer-processes", "1"])
  finally:
    _AUDIT["on"] = False
  assert done.returncode == 0, done.stdout + done.stderr
  return done, list(_AUDIT["paths"])


@pytest.mark.parametrize("watch", ["strace", "audit"])
def test_an_append_opens_only_the_added_and_changed_images(tmp_path, watch):
  if watch == "strace" and not _strace_works():
    pytest.skip("strace is not installed or may not trace here (no ptrace in this "
                "container); the audit case checks the same in this process")
  src, dest = tmp_path / "src", tmp_path / "dest"
  names = [f"{i:03d}.jpg" for i in range(40)]
  dataset(src, names)
  run(src, str(dest), "--append")
  # version 2: two images added, one redrawn (same name and size, new pixels), one removed
  dataset(src, names + ["new1.jpg", "new2.jpg"])
  Image.new("RGB", (40 + 5 % 7, 30), (250, 250, 250)).save(src / "imgs" / names[5])
  doc = json.loads((src / "ann.json").read_text())
  gone = next(i["id"] for i in doc["images"] if i["file_name"] == names[7])
  doc["images"] = [i for i in doc["images"] if i["id"] != gone]
  doc["annotations"] = [a for a in doc["annotations"] if a["image_id"] != gone]
  (src / "ann.json").write_text(json.dumps(doc))
  (src / "imgs" / names[7]).unlink()
  cmd = [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
         "--input", f"train={src / 'ann.json'}", "--images", str(src / "imgs"),
         "--output", str(dest), "--num-shards", "4", "--append"]
  if watch == "strace":
    done, opened = _opened_by_strace(cmd, tmp_path / "strace.log")
  else:
    done, opened = _opened_in_process(cmd)
  images = str(src / "imgs")
  read = {Path(p).name for p in opened if p.startswith(images + "/")}
  assert read == {"new1.jpg", "new2.jpg", names[5]}, sorted(read)
  assert "2 added, 1 changed, 1 removed, 38 kept" in done.stdout, done.stdout
  assert records(latest(dest)) == full(src, tmp_path)


def test_sources_rewritten_with_the_same_content_open_nothing_and_publish_nothing(tmp_path):
  """The annotation file written again (other bytes, the same images and boxes): its
  fingerprint differs, so the job runs and compares every image; none changed, so no image
  is opened, nothing is published and LATEST stays (a kept file left unlinked was once
  stamped here, failing the run)."""
  src, dest = tmp_path / "src", tmp_path / "dest"
  dataset(src, [f"{i:03d}.jpg" for i in range(12)])
  run(src, str(dest), "--append")
  before = latest(dest)
  doc = json.loads((src / "ann.json").read_text())
  (src / "ann.json").write_text(json.dumps(doc, indent=1))
  cmd = [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
         "--input", f"train={src / 'ann.json'}", "--images", str(src / "imgs"),
         "--output", str(dest), "--num-shards", "4", "--append"]
  done, opened = _opened_in_process(cmd)
  assert "unchanged: no image or annotation changed" in done.stdout, done.stdout
  assert not [p for p in opened if p.startswith(str(src / "imgs") + "/")]
  assert latest(dest) == before

"""Issue 30, item 4: a FIFO (or another special file) among the annotation files is an error
record naming it (`not_a_file`), never a run that waits forever. Each run has a timeout: a
regression fails instead of hanging."""
from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import shutil
import threading
from pathlib import Path

import layouts
import layouts_labelme
import pytest

from beam_tfrecord import cli

pytestmark = pytest.mark.e2e

UNBLOCK_AFTER = 120   # seconds: then the watchdog opens the FIFO's other end, and the test fails
GIVE_UP_AFTER = 300   # seconds: a run still going then ends the test process (faulthandler)


def _convert(fifo: Path, *args):
  """`convert ARGS` in this process (no interpreter and TensorFlow start-up), watched: a run
  still going after UNBLOCK_AFTER seconds is let go by opening the FIFO for writing (a reader
  blocked on it then reads end-of-file) and fails the test; one still going after
  GIVE_UP_AFTER seconds ends the process with every thread's traceback; a reader of the FIFO
  left behind by a run that ended fails it too. Returns what the run printed."""
  done, waited = threading.Event(), []

  def watchdog():
    if done.wait(UNBLOCK_AFTER):
      return
    waited.append(True)
    while not done.wait(0.2):
      with contextlib.suppress(OSError):  # ENXIO while nobody has it open for reading
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

  thread = threading.Thread(target=watchdog, daemon=True)
  thread.start()
  faulthandler.dump_traceback_later(GIVE_UP_AFTER, exit=True)
  out, err = io.StringIO(), io.StringIO()
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      cli.main(["convert", *args, "--runner=FnApiRunner"])
  finally:
    faulthandler.cancel_dump_traceback_later()
    done.set()
    thread.join()
  printed = out.getvalue() + err.getvalue()
  assert not waited, f"the run waited on the FIFO {fifo}:\n{printed}"
  try:  # succeeds only while someone has it open for reading (and lets that reader go)
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
  except OSError:  # ENXIO: no reader left behind
    pass
  else:
    pytest.fail(f"a thread of the run still reads the FIFO {fifo} after it ended")
  return printed


def _errors(out: Path):
  manifest_dir = out
  if not (out / "manifest.json").exists():  # a failed run: its report
    manifest_dir = next(out.glob(".beam-tfrecord-run-*"))
  found = []
  for path in manifest_dir.glob("errors-*.jsonl"):
    found.extend(json.loads(line) for line in path.read_text().splitlines() if line)
  return found


def _fifo_in_place_of(path: Path) -> str:
  path.unlink()
  os.mkfifo(path)
  return path.name


def test_a_fifo_label_file_yolo(dataset, tmp_path):
  yaml_path = layouts.write_ultralytics(dataset.images, dataset.image_dir, tmp_path / "yolo")
  label = sorted((tmp_path / "yolo" / "shapes" / "labels").rglob("*.txt"))[0]
  name = _fifo_in_place_of(label)
  out = tmp_path / "out"
  printed = _convert(label, "--format", "yolo", "--input", str(yaml_path), "--output", str(out))
  errors = [e for e in _errors(out) if e["reason"] == "not_a_file"]
  assert errors and name in errors[0]["message"], printed


def test_a_fifo_json_labelme(dataset, tmp_path):
  root = layouts_labelme.write_labelme(dataset.images, dataset.image_dir, tmp_path / "lm")
  doc = sorted(Path(root).rglob("*.json"))[0]
  name = _fifo_in_place_of(doc)
  out = tmp_path / "out"
  printed = _convert(doc, "--format", "labelme", "--input", str(root), "--output", str(out))
  errors = [e for e in _errors(out) if e["reason"] == "not_a_file"]
  assert errors and name in errors[0]["message"], printed


def test_a_fifo_xml_voc(dataset, tmp_path):
  voc = tmp_path / "voc"
  shutil.copytree(dataset.voc_dir, voc)
  xml = sorted((voc / "Annotations").glob("*.xml"))[0]
  name = _fifo_in_place_of(xml)
  out = tmp_path / "out"
  printed = _convert(xml, "--format", "voc", "--input", str(voc),
                     f"--images={dataset.image_dir}", "--output", str(out))
  errors = [e for e in _errors(out) if e["reason"] == "not_a_file"]
  assert errors and name in errors[0]["message"], printed

"""Issue 40, item 10: a FIFO (or another special file) named by an option is refused from its
stat before the run: one line, exit 2, never opened. Opening a FIFO waits for a writer, so a
COCO --input read as "empty" and a --label-map hung the run. (FIFOs found inside folders are
the sources' business: tests/e2e/test_special_annotation_files.py.)"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import threading
import time

import pytest

from beam_tfrecord import cli

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

HANG_SECONDS = 60  # bounds a hang only: a refused option never comes near it


@contextlib.contextmanager
def _watched(fifo: str):
  """Watch `fifo` while the block runs: a reader waiting in open() is let go at once (a
  writer opened, then closed: it reads nothing) and recorded; after HANG_SECONDS any open is
  let go and the run recorded as hung. Yields the list of what happened."""
  seen, done = [], threading.Event()

  def watch():
    deadline = time.monotonic() + HANG_SECONDS
    while not done.wait(0.02):
      try:  # succeeds only while someone has the FIFO open for reading
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        seen.append("opened for reading")
      except OSError as e:
        if e.errno != errno.ENXIO:
          raise
      if time.monotonic() > deadline:
        seen.append("hung")
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets a writer's open go
        deadline = float("inf")

  watcher = threading.Thread(target=watch, daemon=True)
  watcher.start()
  try:
    yield seen
  finally:
    done.set()
    watcher.join()


def _cli(argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = cli.main([str(a) for a in argv])
  return code, out.getvalue(), err.getvalue()


def _cases(data, tmp):
  """(option, wanted, argv) for each option that names a file or folder; FIFO stands for
  the FIFO's path."""
  coco = f"train={data.coco_file('train')}"
  csv = f"train={data.csv_file('train')}"
  lines = tmp / "train.txt"  # yolo-keras and Open Images inputs: their own regular files
  lines.write_text("images/a.jpg 1,2,30,40,0\n")
  boxes = tmp / "boxes.csv"
  boxes.write_text("ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,"
                   "IsTruncated,IsGroupOf,IsDepiction,IsInside\n")
  out = tmp / "out"
  images = f"--images={data.image_dir}"
  return [
      ("--input", "regular file", ["convert", "--format", "coco", "--input", "train=FIFO", images,
                           "--output", out]),
      ("--input", "regular file", ["convert", "--format", "csv", "--input", "train=FIFO", images,
                           "--output", out]),
      ("--input", "regular file", ["convert", "--input", "FIFO", images, "--output", out]),
      ("--label-map", "regular file", ["convert", "--format", "coco", "--input", coco,
                               "--label-map", "FIFO", "--output", out]),
      ("--label-map", "regular file", ["convert", "--format", "csv", "--input", csv, "--label-map",
                               "FIFO", "--classes", "cat", "--output", out, "--append"]),
      ("--classes-file", "regular file", ["convert", "--format", "yolo-keras", "--input", lines,
                                  "--classes-file", "FIFO", "--output", out]),
      ("--class-descriptions", "regular file", ["convert", "--format", "openimages", "--input",
                                        f"train={boxes}", "--class-descriptions", "FIFO",
                                        "--output", out]),
      ("--images", "directory", ["convert", "--format", "coco", "--input", coco, "--images",
                                 "FIFO", "--output", out]),
      ("--output", "directory", ["convert", "--format", "coco", "--input", coco, "--output",
                                 "FIFO"]),
      ("show --output", "regular file", ["show", tmp, "--output", "FIFO"]),
      ("inspect --plot", "regular file", ["inspect", tmp, "--plot", "FIFO"]),
  ]


CASES = ["coco-input", "csv-input", "auto-input", "label-map", "label-map-append",
         "classes-file", "class-descriptions", "images", "output", "show-output",
         "inspect-plot"]


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_a_fifo_named_by_an_option_is_refused_unopened(small_dataset, tmp_path, case):
  option, wanted, argv = _cases(small_dataset, tmp_path)[case]
  fifo = str(tmp_path / "pipe.png")  # .png: show and inspect --plot take the name as it is
  os.mkfifo(fifo)
  argv = [str(a).replace("FIFO", fifo) for a in argv]
  with _watched(fifo) as seen:
    code, out, err = _cli(argv)
  assert not seen, f"{option}: the FIFO was {seen[0]}\n{out}{err}"
  assert code == 2, out + err
  assert err.count("\n") == 1 and err.startswith("beam-tfrecord: error: "), err
  assert f"{option} " in err and f"pipe.png is not a {wanted}" in err and "(FIFO)" in err, err
  assert not (tmp_path / "out").exists()


def test_a_directory_as_a_file_option_is_one_line(small_dataset, tmp_path):
  """The same check names a directory given where a file is wanted."""
  folder = tmp_path / "labels"
  folder.mkdir()
  code, out, err = _cli(["convert", "--format", "coco", "--input",
                         f"train={small_dataset.coco_file('train')}", "--label-map", folder,
                         "--output", tmp_path / "out"])
  assert code == 2, out + err
  assert err == f"beam-tfrecord: error: --label-map {folder} is not a regular file (a directory)\n"

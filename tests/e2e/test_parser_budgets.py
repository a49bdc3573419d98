"""Nesting and size bombs in annotation files, converted in a subprocess under a memory ceiling
(RLIMIT_AS): each ends with its error record (or one line and exit 2), never a MemoryError, a
traceback or the OOM killer, and the process's peak stays near a normal run's (~220 MB).

The COCO bombs cost the launcher's check (ijson.parse's prefixes) the square of the depth:
200,000 '[' (402 kB) went to 24 GB; under the ceiling its MemoryError was swallowed, so the
peak is what tells."""
from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import sys

import bad_data as bd
import pytest
from conftest import REPO, subprocess_env

CEILING = 3 << 30       # a normal conversion needs ~2 GB of address space (threads, TF)
PEAK_LIMIT_MB = 1024    # a normal conversion peaks at ~220 MB resident
DEPTH = 200_000

# the conversion, then its own peak resident size on stderr's last line
_MAIN = ("import resource, sys\nfrom beam_tfrecord.cli import main\ncode = main(sys.argv[1:])\n"
         "print('peak-mb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "
         "file=sys.stderr)\nsys.exit(code)")


def _ceiling():
  resource.setrlimit(resource.RLIMIT_AS, (CEILING, CEILING))


def convert_limited(*args: str):
  """(exit code, stderr without the peak line, peak MB, error records of the output)."""
  proc = subprocess.run([sys.executable, "-c", _MAIN, "convert", *args, bd.RUNNER],
                        cwd=str(REPO), env=subprocess_env(), capture_output=True, text=True,
                        timeout=600, preexec_fn=_ceiling)
  lines = proc.stderr.splitlines()
  assert lines and lines[-1].startswith("peak-mb "), proc.stderr[-3000:]
  output = args[list(args).index("--output") + 1]
  # a failed run leaves its report in its run directory, the output untouched
  reports = [output] + sorted(glob.glob(os.path.join(output, ".beam-tfrecord-run-*")))
  errors = [e for d in reports if os.path.isdir(d) for e in bd.read_errors(d)]
  return proc.returncode, "\n".join(lines[:-1]), int(lines[-1].split()[1]), errors


def check_clean(code: int, stderr: str, peak: int) -> None:
  assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-3000:]
  assert code in (0, 2, 4), (code, stderr[-3000:])  # 4: a file-level rejection
  assert peak < PEAK_LIMIT_MB, peak


def _good_coco(root) -> str:
  coco = bd.Coco(str(root), [(1, "cat")])
  coco.image(1, "good.jpg", bd.jpeg((64, 48)), width=64, height=48)
  coco.ann(1, 1, [1, 1, 10, 10])
  return coco.write(str(root / "good.json"))


@pytest.mark.parametrize("where", ["images_entry", "top_level_key"])
def test_coco_nesting_bomb(tmp_path, where):
  """A bomb beside a good file: the good file is converted, the bomb reported as too_deep."""
  bomb = "[" * DEPTH + "]" * DEPTH
  doc = ('{"images": [%s], "annotations": [], "categories": []}' % bomb
         if where == "images_entry" else
         '{"info": %s, "images": [{"id": 1, "file_name": "good.jpg"}], "annotations": [], '
         '"categories": [{"id": 1, "name": "cat"}]}' % bomb)
  (tmp_path / "bomb.json").write_text(doc)
  good = _good_coco(tmp_path)
  out = tmp_path / "out"
  code, stderr, peak, errors = convert_limited(
      "--format", "coco", "--input", str(tmp_path / "bomb.json"), "--input", good,
      "--images", str(tmp_path), "--output", str(out))
  check_clean(code, stderr, peak)
  assert code == 0, stderr[-3000:]
  # the over-deep entry alone is rejected; a value outside the arrays is never read
  assert {(e["reason"], e["level"], e["source"]) for e in errors if e["level"] != "warning"} == (
      {("too_deep", "image", str(tmp_path / "bomb.json") + "#images[0]")}
      if where == "images_entry" else set())
  manifest = json.loads((out / "manifest.json").read_text())
  assert sum(s["images"] for s in manifest["splits"].values()) == 1  # good.jpg, once


def test_coco_nesting_bomb_at_the_top(tmp_path):
  (tmp_path / "bomb.json").write_text("[" * DEPTH + "]" * DEPTH)
  code, stderr, peak, _ = convert_limited(
      "--format", "coco", "--input", str(tmp_path / "bomb.json"), "--output",
      str(tmp_path / "out"))
  check_clean(code, stderr, peak)
  assert code == 2 and stderr.strip().splitlines()[-1].startswith("beam-tfrecord: error: "), stderr
  assert "is a JSON array, not a COCO object" in stderr


def test_voc_nesting_bomb(tmp_path):
  """A deeply nested VOC XML (under the size budget) beside a good one."""
  folder = tmp_path / "voc"
  folder.mkdir()
  (folder / "good.jpg").write_bytes(bd.jpeg((64, 48)))
  (folder / "good.xml").write_bytes(bd.voc_xml("good.jpg", [dict(
      name="cat", xmin=1, ymin=1, xmax=10, ymax=10)], size=(64, 48)))
  (folder / "bomb.jpg").write_bytes(bd.jpeg((64, 48)))
  (folder / "bomb.xml").write_bytes(
      b"<annotation><filename>bomb.jpg</filename>" + b"<a>" * DEPTH + b"</a>" * DEPTH
      + b"</annotation>")
  code, stderr, peak, errors = convert_limited(
      "--format", "voc", "--input", str(folder), "--output", str(tmp_path / "out"))
  check_clean(code, stderr, peak)
  assert [(e["reason"], e["key"]) for e in errors] == [("too_deep", str(folder / "bomb.xml"))]


def test_csv_line_bomb(tmp_path):
  """A CSV whose second half is one 8 MB line of commas: the rows before it are kept."""
  (tmp_path / "good.jpg").write_bytes(bd.jpeg((64, 48)))
  with open(tmp_path / "labels.csv", "w") as f:
    f.write("filename,width,height,class,xmin,ymin,xmax,ymax\n"
            "good.jpg,64,48,cat,1,1,10,10\n" + "," * (8 << 20))
  code, stderr, peak, errors = convert_limited(
      "--format", "csv", "--input", str(tmp_path / "labels.csv"), "--output",
      str(tmp_path / "out"))
  check_clean(code, stderr, peak)
  assert code == 4, stderr  # a file-level rejection fails the run (issue 30, item 5)
  assert [(e["reason"], e["key"]) for e in errors] == [
      ("too_large", str(tmp_path / "labels.csv"))]

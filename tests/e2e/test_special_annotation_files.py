"""Issue 30, item 4: a FIFO (or another special file) among the annotation files is an error
record naming it (`not_a_file`), never a run that waits forever. Each run has a timeout: a
regression fails instead of hanging."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import layouts
import layouts_labelme
import pytest

pytestmark = pytest.mark.e2e


def _convert(*args):
  done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "convert", *args],
                        capture_output=True, text=True, timeout=240)
  return done


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
  done = _convert("--format", "yolo", "--input", str(yaml_path), "--output", str(out))
  errors = [e for e in _errors(out) if e["reason"] == "not_a_file"]
  assert errors and name in errors[0]["message"], done.stdout + done.stderr


def test_a_fifo_json_labelme(dataset, tmp_path):
  root = layouts_labelme.write_labelme(dataset.images, dataset.image_dir, tmp_path / "lm")
  doc = sorted(Path(root).rglob("*.json"))[0]
  name = _fifo_in_place_of(doc)
  out = tmp_path / "out"
  done = _convert("--format", "labelme", "--input", str(root), "--output", str(out))
  errors = [e for e in _errors(out) if e["reason"] == "not_a_file"]
  assert errors and name in errors[0]["message"], done.stdout + done.stderr


def test_a_fifo_xml_voc(dataset, tmp_path):
  voc = tmp_path / "voc"
  shutil.copytree(dataset.voc_dir, voc)
  xml = sorted((voc / "Annotations").glob("*.xml"))[0]
  name = _fifo_in_place_of(xml)
  out = tmp_path / "out"
  done = _convert("--format", "voc", "--input", str(voc), f"--images={dataset.image_dir}",
                  "--output", str(out))
  errors = [e for e in _errors(out) if e["reason"] == "not_a_file"]
  assert errors and name in errors[0]["message"], done.stdout + done.stderr

"""sources/yolo_keras.py: keras-yolo3 annotation text (voc_annotation.py's absolute paths, a
Roboflow YOLO Keras TXT export), end to end, read back with TF; byte ranges; bad lines;
--format auto.

Fixtures are written by tests/layouts_yolo_keras.py from the generated sample images, laid out
as the real tools write them. Every run goes through the CLI on the in-process runner.
"""
from __future__ import annotations

import io
import json

import layouts
import layouts_yolo_keras as lk
import pytest
from bad_data import RUNNER, convert

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import Box, ImageAnnotation, InputError, ObjectAnnotation
from beam_tfrecord.sources import detect, yolo_keras

VOC_IDS = {name: i + 1 for i, name in enumerate(lk.KERAS_NAMES)}  # class i -> id i + 1


# ---------------------------------------------------------------------------------------------
# Pure functions


def test_parse_line_boxes_backgrounds_and_errors():
  names = ["a", "b"]
  path, objects, errors = yolo_keras.parse_line("img/1.jpg 10,20,30,40,1 5,6,7.5,8,0\n", names)
  assert (path, errors) == ("img/1.jpg", [])
  assert objects == [ObjectAnnotation("b", Box(10, 20, 30, 40)),
                     ObjectAnnotation("a", Box(5, 6, 7.5, 8))]
  assert yolo_keras.parse_line("/abs/2.jpg\n", names) == ("/abs/2.jpg", [], [])
  assert yolo_keras.parse_line("  \n", names) is None
  path, objects, errors = yolo_keras.parse_line("3.jpg 1,2,3,4,2 1,2,3,4,-1 1,2,3,4,0", names)
  assert [o.label for o in objects] == ["a"]
  assert [(e.reason, e.stage) for e in errors] == [("class_out_of_range", "validate")] * 2
  assert "class id 2 of box 1,2,3,4,2" in errors[0].message
  for line, text in {"my image.jpg 1,2,3,4,0": "a path with a space cannot be written",
                     "4.jpg 1,2,3,4": "is not a box", "5.jpg 1,2,3,4,0.5": "is not a box",
                     "6.jpg 1,2,x,4,0": "is not a box", "1,2,3,4,0 7.jpg": "a box, not an"}.items():
    with pytest.raises(InputError, match=text) as e:
      yolo_keras.parse_line(line, names)
    assert e.value.reason == "malformed_line", line


def test_parse_classes():
  assert yolo_keras.parse_classes("person\n dog \ncat\n\n\n") == ("person", "dog", "cat")
  for text, message in (("a\n\nb\n", "line 2 is blank"), ("a\nb\na\n", "line 3 repeats"),
                        ("\n\n", "names no classes")):
    with pytest.raises(ValueError, match=message):
      yolo_keras.parse_classes(text)


def test_read_lines_in_ranges_give_the_whole_files_lines():
  """Every cut gives each line once, to the range it starts in; a BOM is dropped; a line over
  the limit and a line that is not UTF-8 are errors of their own."""
  data = ("\ufeffa.jpg 1,2,3,4,0\r\nb.jpg\n\n" + "c.jpg " + "1,2,3,4,0 " * 8 + "\n"
          "d.jpg 5,6,7,8,1\n").encode() + b"\xff\xfe.jpg\n" + b"e.jpg"
  whole = list(yolo_keras.read_lines(io.BytesIO(data), 0, len(data), limit=64))
  assert [t if isinstance(t, str) else t.reason for _, t in whole] == [
      "a.jpg 1,2,3,4,0\r\n", "b.jpg\n", "\n", "too_large", "d.jpg 5,6,7,8,1\n",
      "malformed_line", "e.jpg"]
  assert [n for n, _ in whole] == list(range(1, 8))
  for size in range(1, len(data) + 1):
    cut = []
    for start in range(0, len(data), size):
      cut += [t if isinstance(t, str) else t.reason
              for _, t in yolo_keras.read_lines(io.BytesIO(data), start,
                                                min(start + size, len(data)), limit=64)]
    assert cut == [t if isinstance(t, str) else t.reason for _, t in whole], size


def test_splits_from_names():
  assert yolo_keras.split_of(None, "/d/2007_train.txt") == "train"
  assert yolo_keras.split_of(None, "/d/2007_val.txt") == "val"
  assert yolo_keras.split_of(None, "/d/export/valid/_annotations.txt") == "valid"
  assert yolo_keras.split_of(None, "/d/export/_annotations.txt") is None
  assert yolo_keras.split_of(None, "/d/annotations.txt") is None
  assert yolo_keras.split_of("test", "/d/2007_train.txt") == "test"


# ---------------------------------------------------------------------------------------------
# Detection


@pytest.fixture(scope="module")
def tree(tmp_path_factory, dataset):
  """keras-yolo3 and Roboflow keras layouts and every other format's, from the shared sample."""
  base = tmp_path_factory.mktemp("keras-layouts")
  images, image_dir = dataset.images, dataset.image_dir
  lk.write_yolo_keras(images, image_dir, base / "keras")
  lk.write_yolo_keras(images, image_dir, base / "roboflow-keras", style="roboflow")
  return layouts.write_every_layout(images, image_dir, base)


def test_detects_keras_text_and_exports_only(tree, dataset):
  train = tree / "keras" / "2007_train.txt"
  found = detect.detect([str(train)])
  assert (found.format, found.inputs) == ("yolo-keras", (str(train),))
  assert found.line() == "detected: yolo-keras (keras-yolo3 annotation text)"
  export = tree / "roboflow-keras"
  found = detect.detect([str(export)])
  assert found.format == "yolo-keras"
  assert found.reason == "split folders train, valid with _annotations.txt"
  assert list(found.inputs) == [f"train={export}/train/_annotations.txt",
                                f"valid={export}/valid/_annotations.txt"]
  assert detect.detect([str(export / "valid")]).inputs == (
      f"{export}/valid/_annotations.txt",)
  # YOLO label files (numbers), a Darknet list (paths only: like background lines), LabelImg's
  # classes.txt and every other layout are not keras-yolo3 text
  yolo_labels = next((tree / "ultralytics" / "shapes" / "labels" / "train").glob("*.txt"))
  others = [yolo_labels, tree / "darknet" / "data" / "train.txt",
            tree / "darknet" / "data" / "obj.names", tree / "keras" / "model_data" /
            "voc_classes.txt", dataset.coco_file("train"), dataset.csv_file("val"),
            dataset.voc_dir, tree / "ultralytics" / "shapes.yaml", tree / "darknet" / "data",
            tree / "raccoon", tree / "folders"] + [
                tree / f"roboflow-{kind}" for kind in ("coco", "csv", "voc", "yolo")]
  for path in others:
    assert "yolo-keras" not in [f for f, _ in detect.candidates(str(path))], path
  only_backgrounds = tree / "backgrounds.txt"
  only_backgrounds.write_text("a.jpg\nb.jpg\n")
  assert yolo_keras.detect(str(only_backgrounds)) is None


# ---------------------------------------------------------------------------------------------
# Pipelines


@pytest.mark.e2e
def test_voc_annotation_absolute_paths(dataset, tmp_path, capsys):
  """voc_annotation.py's 2007_train.txt / 2007_val.txt (absolute paths, --allow-absolute-paths)
  with model_data/voc_classes.txt: every image back with its bytes, size, integer boxes and
  id = class index + 1; split from the file names; background lines kept."""
  root = lk.write_yolo_keras(dataset.images, dataset.image_dir, tmp_path / "src")
  run = convert(["--input", str(root / "2007_train.txt"), "--input", str(root / "2007_val.txt"),
                 "--classes-file", str(root / "model_data" / "voc_classes.txt"),
                 "--allow-absolute-paths", "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert "detected: yolo-keras (keras-yolo3 annotation text)" in run.stdout
  assert run.manifest["format"] == "yolo-keras" and run.manifest["label_map"] == VOC_IDS
  images = lk.view(dataset.images)
  layouts.check_od_examples(run, images, root / "VOCdevkit" / "VOC2007" / "JPEGImages",
                            VOC_IDS)
  jpegs = (root / "VOCdevkit" / "VOC2007" / "JPEGImages").resolve()
  assert {e["filename"] for e in run.examples} == {f"{jpegs}/{im.file_name}" for im in images}
  assert any(not im.boxes for im in images) and run.errors == []


@pytest.mark.e2e
def test_roboflow_export(small_dataset, tmp_path, capsys):
  """A Roboflow YOLO Keras TXT export given as its folder: one split per folder, the classes
  from each _classes.txt, names relative to the folder."""
  ds = small_dataset
  root = lk.write_yolo_keras(ds.images, ds.image_dir, tmp_path / "export", style="roboflow")
  run = convert(["--input", str(root), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert ("detected: yolo-keras (split folders train, valid with _annotations.txt)"
          in run.stdout)
  names = sorted({b[0] for im in ds.images for b in im.boxes})
  ids = {name: i + 1 for i, name in enumerate(names)}
  assert run.manifest["label_map"] == ids
  layouts.check_od_examples(run, lk.view(ds.images, "roboflow"), ds.image_dir, ids)
  assert {e["filename"] for e in run.examples} == {im.file_name for im in ds.images}
  assert run.errors == []


@pytest.mark.e2e
def test_bad_lines_become_error_records(small_dataset, tmp_path):
  """A class id out of range (object level; the line's other boxes kept), a malformed line, a
  path with a space, an absolute path without --allow-absolute-paths, a path leaving the root
  (image level, each at its line) and a missing image: the rest is converted."""
  ds = small_dataset
  root = lk.write_yolo_keras(ds.images, ds.image_dir, tmp_path / "export", style="roboflow")
  annotations = root / "train" / "_annotations.txt"
  lines = annotations.read_text().splitlines()
  boxed = next(im for im in ds.images if im.boxes and im.split == "train")
  at = next(i for i, line in enumerate(lines) if line.startswith(boxed.file_name + " "))
  lines[at] += " 1,1,9,9,7"
  n = len(lines)
  lines += ["a picture.jpg 1,2,3,4,0", "x.jpg 1,2,3", "/elsewhere/y.jpg 1,2,3,4,0",
            "../z.jpg", "gone.jpg 1,1,5,5,0"]
  annotations.write_text("\n".join(lines) + "\n")
  run = convert(["--format", "yolo-keras", "--input", f"train={annotations}",
                 "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  got = sorted((e["reason"], e["level"], e["key"], e["source"]) for e in run.errors
               if e["stage"] != "locate" or e["reason"] != "missing_image")
  where = str(annotations)
  assert got == sorted([
      ("class_out_of_range", "object", boxed.file_name, f"{where}:{at + 1}"),
      ("malformed_line", "image", "a", f"{where}:{n + 1}"),
      ("malformed_line", "image", "x.jpg", f"{where}:{n + 2}"),
      ("absolute_path", "image", "/elsewhere/y.jpg", f"{where}:{n + 3}"),
      ("path_traversal", "image", "../z.jpg", f"{where}:{n + 4}")])
  assert "--allow-absolute-paths" in run.errors_where(reason="absolute_path")[0]["message"]
  assert "a space" in run.errors_where(key="a")[0]["message"]
  assert [e["key"] for e in run.errors if e["reason"] not in {g[0] for g in got}] == [
      "gone.jpg"]
  train = [im for im in lk.view(ds.images, "roboflow") if im.split == "train"]
  ids = {name: i + 1 for i, name in enumerate(sorted({b[0] for im in ds.images
                                                      for b in im.boxes}))}
  layouts.check_od_examples(run, train, ds.image_dir, ids)


def _read(inputs, tmp_path, name, **options):
  """(sorted image reprs, sorted error JSON) of ReadYoloKeras on the FnApiRunner."""
  import apache_beam as beam
  out_dir = tmp_path / f"out-{name}"
  p = beam.Pipeline("FnApiRunner")
  out = p | yolo_keras.ReadYoloKeras(inputs, lk.KERAS_NAMES, **options)
  for kind, pcoll, text in (("images", out.images, repr),
                            ("errors", out.errors, lambda e: e.to_json())):
    _ = (pcoll | f"Text[{kind}]" >> beam.Map(text)
         | f"Write[{kind}]" >> beam.io.WriteToText(str(out_dir / kind), num_shards=1))
  p.run().wait_until_finish()
  found = {}
  for kind in ("images", "errors"):
    [path] = [f for f in out_dir.iterdir() if f.name.startswith(kind)]
    found[kind] = sorted(path.read_text(encoding="utf-8").splitlines())
  return found["images"], found["errors"]


@pytest.mark.e2e
def test_ranges_give_the_whole_files_images_and_lines(tmp_path):
  """A file read in 200-byte ranges by any worker: the same images and the same errors at the
  same file lines as a whole-file read, in process or not."""
  path = tmp_path / "train.txt"
  lines, expected, bad = [], [], []
  for i in range(150):
    if i % 13 == 4:
      lines.append(f"bad_{i}.jpg 1,2,3")
      bad.append(len(lines))
      continue
    boxes = [(i % 3, i, i + 1, i + 10, i + 20)] * (i % 3)
    lines.append(f"img_{i}.jpg" + "".join(f" {x},{y},{x2},{y2},{c}" for c, x, y, x2, y2 in boxes))
    expected.append(repr(ImageAnnotation(
        key=f"img_{i}.jpg", uri=str(tmp_path / f"img_{i}.jpg"), source_id=f"img_{i}.jpg",
        source=str(path), split="train", objects=tuple(
            ObjectAnnotation(lk.KERAS_NAMES[c], Box(*map(float, (x, y, x2, y2))))
            for c, x, y, x2, y2 in boxes))))
  path.write_text("\n".join(lines) + "\n")
  inputs = [("train", str(path), str(tmp_path))]
  whole = _read(inputs, tmp_path, "whole")
  ranges = _read(inputs, tmp_path, "ranges", split_bytes=200)
  local = _read(inputs, tmp_path, "local", split_bytes=200, in_process=True)
  assert path.stat().st_size > 15 * 200  # 19 ranges
  assert whole == ranges == local
  assert whole[0] == sorted(expected)
  errors = [json.loads(e) for e in whole[1]]
  assert sorted(e["source"] for e in errors) == sorted(f"{path}:{n}" for n in bad)
  assert {(e["reason"], e["level"]) for e in errors} == {("malformed_line", "image")}


# ---------------------------------------------------------------------------------------------
# Command lines


@pytest.mark.e2e
def test_bad_command_lines_exit_2_with_one_line(small_dataset, tmp_path, capsys):
  ds = small_dataset
  root = lk.write_yolo_keras(ds.images, ds.image_dir, tmp_path / "src")
  train, classes = root / "2007_train.txt", root / "model_data" / "voc_classes.txt"
  labels = tmp_path / "label.txt"
  labels.write_text("0 0.5 0.5 0.2 0.2\n")
  (tmp_path / "gaps.txt").write_text("a\n\nb\n")
  out = ["--output", str(tmp_path / "o")]
  cases = [
      (["--input", str(train), "--classes-file", str(classes)], "pass --allow-absolute-paths"),
      (["--format", "yolo-keras", "--input", str(train), "--allow-absolute-paths"],
       "needs --classes-file FILE"),
      (["--format", "yolo-keras", "--input", str(train), "--allow-absolute-paths",
        "--classes-file", str(tmp_path / "none.txt")], "--classes-file " +
       str(tmp_path / "none.txt") + ": no such file"),
      (["--format", "yolo-keras", "--input", str(train), "--allow-absolute-paths",
        "--classes-file", str(tmp_path / "gaps.txt")], "line 2 is blank"),
      (["--format", "yolo-keras", "--input", str(labels), "--classes-file", str(classes)],
       "is not keras-yolo3 annotation text"),
      (["--format", "yolo-keras", "--input", str(tmp_path / "nothing.txt"), "--classes-file",
        str(classes)], "no such file"),
      (["--input", str(train), "--allow-absolute-paths", "--class-descriptions",
        str(classes)], "--class-descriptions applies to --format openimages only"),
  ]
  for args, message in cases:
    run = convert(args + out + [RUNNER], capsys)
    assert run.code == 2, (args, run.stderr)
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    assert not (tmp_path / "o").exists()


def test_launcher_reads_only_the_head(tmp_path, monkeypatch):
  """check and detect read at most DETECT_HEAD_BYTES + 1 of an annotation file."""
  from beam_tfrecord.storage import files
  path = tmp_path / "big.txt"
  path.write_text("a.jpg 1,2,3,4,0\n" * 20000)
  reads = []
  real_head = files.head
  monkeypatch.setattr(files, "head", lambda uri, size=4096: reads.append(size)
                      or real_head(uri, size))
  yolo_keras.check_input(str(path), allow_absolute=False)
  assert yolo_keras.detect(str(path)) == "keras-yolo3 annotation text"
  assert reads == [yolo_keras.DETECT_HEAD_BYTES + 1] * 2
  with pytest.raises(UsageError, match="absolute path /x/a.jpg"):
    path.write_text("/x/a.jpg 1,2,3,4,0\n")
    yolo_keras.check_input(str(path), allow_absolute=False)

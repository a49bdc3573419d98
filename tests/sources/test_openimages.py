"""sources/openimages.py: Open Images box CSVs with their class descriptions, end to end, read
back with TF; big files read in byte ranges; bad rows; --format auto.

Fixtures are written by tests/layouts_openimages.py from the generated sample images, laid out
as the official files are. Every run goes through the CLI on the in-process runner.
"""
from __future__ import annotations

import dataclasses
import os

import layouts
import layouts_openimages as oi
import pytest
from bad_data import RUNNER, convert

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import Box, ImageAnnotation, InputError, ObjectAnnotation
from beam_tfrecord.sources import csv as csv_source
from beam_tfrecord.sources import detect, openimages

IDS = {"Cat": 1, "Dog": 2, "Person": 3}  # sorted display names -> 1..N
CLASSES = {"/m/01yrx": "Cat", "/m/0bt9lr": "Dog", "/m/01g317": "Person"}


def _row(**values):
  row = {"filename": "000002b66c9c498e", "class": "/m/01g317", "xmin": "0.0125",
         "xmax": "0.195312", "ymin": "0.148438", "ymax": "0.5875", "confidence": "1",
         "truncated": "1", "group_of": "0"}
  row.update(values)
  return row


# ---------------------------------------------------------------------------------------------
# Pure functions


def test_header_and_splits():
  assert openimages.is_box_header("\ufeff" + oi.HEADER + "\r\n")
  assert openimages.is_box_header(oi.HEADER + "," + ",".join(oi.CLICKS))
  assert not openimages.is_box_header(oi.HEADER + ",Extra")
  assert not openimages.is_box_header("ImageID,Source,LabelName,Confidence")  # image labels
  assert not openimages.is_box_header("filename,width,height,class,xmin,ymin,xmax,ymax")
  assert openimages.split_of(None, "/d/oidv6-train-annotations-bbox.csv") == "train"
  assert openimages.split_of(None, "gs://b/validation-annotations-bbox.csv") == "validation"
  assert openimages.split_of(None, "test-annotations-bbox.csv") == "test"
  assert openimages.split_of(None, "/d/boxes.csv") == "train"
  assert openimages.split_of("val", "/d/test-annotations-bbox.csv") == "val"
  assert openimages.split_of(None, "/d/contest-boxes.csv") == "train"  # a word, not a part


def test_parse_descriptions_with_and_without_header():
  v6 = "/m/011k07,Tortoise\n/m/01g317,Person\n\n"
  assert openimages.parse_descriptions(v6) == {"/m/011k07": "Tortoise", "/m/01g317": "Person"}
  v7 = "LabelName,DisplayName\n/m/011k07,Tortoise\n/g/11bc5ns8m,\"Ball, beach\"\n"
  assert openimages.parse_descriptions(v7) == {"/m/011k07": "Tortoise",
                                               "/g/11bc5ns8m": "Ball, beach"}
  # one display name, two machine ids: both kept, told apart by their id
  shared = "/m/0a,Seal\n/m/0b,Seal\n/m/0c,Tortoise\n"
  assert openimages.parse_descriptions(shared) == {
      "/m/0a": "Seal (/m/0a)", "/m/0b": "Seal (/m/0b)", "/m/0c": "Tortoise"}
  for bad, message in (("/m/0a,Seal,extra\n", "line 1: expected LabelName,DisplayName"),
                       ("/m/0a,Seal\n/m/0b\n", "line 2: expected"),
                       ("/m/0a,Seal\n/m/0a,Walrus\n", "line 2: /m/0a is named both"),
                       ("LabelName,DisplayName\n", "names no classes"), ("", "names no")):
    with pytest.raises(ValueError, match=message):
      openimages.parse_descriptions(bad)


def test_parse_row_values_flags_and_errors():
  image_id, values = openimages.parse_row(_row(), CLASSES)
  # the file's column order is XMin, XMax, YMin, YMax; Box's is xmin, ymin, xmax, ymax
  assert (image_id, values) == ("000002b66c9c498e",
                                ("Person", (0.0125, 0.148438, 0.195312, 0.5875), False, True))
  assert openimages.parse_row(_row(group_of="1", truncated="-1"), CLASSES)[1][2:] == (True, None)
  assert openimages.parse_row(_row(group_of="-1", truncated="0"), CLASSES)[1][2:] == (False,
                                                                                      False)
  assert openimages.parse_row(_row(confidence="0"), CLASSES) == ("000002b66c9c498e", None)
  cases = {"unknown_class": _row(**{"class": "/m/0zzz"}), "missing_field": _row(filename=" "),
           "wrong_type": _row(xmax="nan"), "malformed_row": _row(
               **{csv_source.WRONG_WIDTH: (12, 13)})}
  cases["flag"] = _row(group_of="2")
  cases["confidence"] = _row(confidence="high")
  for name, row in cases.items():
    with pytest.raises(InputError) as e:
      openimages.parse_row(row, CLASSES)
    assert e.value.reason == {"flag": "wrong_type", "confidence": "wrong_type"}.get(name, name)


def test_to_image_keys_and_unsafe_ids(tmp_path):
  values = [("Cat", (0.1, 0.2, 0.3, 0.4), True, None), None]
  image = openimages.to_image("b.csv", "train", str(tmp_path), "00ab", values)
  assert image == ImageAnnotation(
      key="00ab.jpg", uri=str(tmp_path / "00ab.jpg"), source_id="00ab", source="b.csv",
      split="train", objects=(ObjectAnnotation("Cat", Box(0.1, 0.2, 0.3, 0.4, normalized=True),
                                               is_crowd=True),))
  for bad, reason in (("../x", "path_traversal"), ("/etc/passwd", "absolute_path")):
    with pytest.raises(InputError) as e:
      openimages.to_image("b.csv", "train", str(tmp_path), bad, values)
    assert e.value.reason == reason


# ---------------------------------------------------------------------------------------------
# Detection


@pytest.fixture(scope="module")
def tree(tmp_path_factory, dataset):
  """Open Images (V6 and V7) and every other format's layout, from the shared sample."""
  base = tmp_path_factory.mktemp("oi-layouts")
  images, image_dir = dataset.images, dataset.image_dir
  oi.write_openimages(images, image_dir, base / "v6")
  oi.write_openimages(images, image_dir, base / "v7", version="v7")
  return layouts.write_every_layout(images, image_dir, base)


def test_detects_box_csvs_and_nothing_else(tree, dataset):
  for name in ("oidv6-train-annotations-bbox.csv", "validation-annotations-bbox.csv"):
    path = str(tree / "v6" / name)
    assert openimages.detect(path) == "Open Images box CSV"
    assert csv_source.detect(path) is None  # the csv format leaves it to openimages
    found = detect.detect([path])
    assert (found.format, found.inputs) == ("openimages", (path,))
    assert found.line() == "detected: openimages (Open Images box CSV)"
  # the descriptions are a CSV without the box header: not a box file
  assert openimages.detect(str(tree / "v6" / "class-descriptions-boxable.csv")) is None
  others = [dataset.coco_file("train"), dataset.csv_file("val"), dataset.voc_dir,
            tree / "ultralytics" / "shapes.yaml", tree / "darknet" / "data" / "obj.data",
            tree / "darknet" / "data" / "train.txt", tree / "raccoon", tree / "folders",
            tree / "roboflow-csv" / "train" / "_annotations.csv"] + [
                tree / f"roboflow-{kind}" for kind in ("coco", "csv", "voc", "yolo")]
  for path in others:
    assert "openimages" not in [f for f, _ in detect.candidates(str(path))], path
  assert csv_source.detect(str(dataset.csv_file("val"))) == "CSV file"


# ---------------------------------------------------------------------------------------------
# Pipelines


@pytest.mark.e2e
def test_v6_files_per_split(dataset, tmp_path, capsys):
  """V6's 21-column train file and 13-column validation file, descriptions without a header
  beside them, images in train/ and validation/: every boxed image back with its bytes, size,
  boxes, display names, ids from sorted names, is_crowd and truncated."""
  root = oi.write_openimages(dataset.images, dataset.image_dir, tmp_path / "oi")
  train, val = root / "oidv6-train-annotations-bbox.csv", root / "validation-annotations-bbox.csv"
  run = convert(["--input", f"train={train}", "--input", f"validation={val}",
                 "--images", f"train={root / 'train'}", "--images",
                 f"validation={root / 'validation'}", "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert "detected: openimages (Open Images box CSV)" in run.stdout
  assert run.manifest["format"] == "openimages" and run.manifest["label_map"] == IDS
  images = oi.view(dataset.images)
  assert layouts.split_counts(run) == {"train": sum(im.split == "train" for im in images),
                                       "validation": sum(im.split == "validation"
                                                         for im in images)}
  for split in ("train", "validation"):
    members = [im for im in images if im.split == split]
    only = dataclasses.replace(run, examples=[e for e in run.examples if e["split"] == split])
    layouts.check_od_examples(only, members, root / split, IDS)
  by_name = {os.path.basename(e["filename"]): e for e in run.examples}
  originals = [im for im in dataset.images if im.boxes]
  for im, original in zip(images, originals):
    ex = by_name[im.file_name]
    assert ex["image/source_id"] == im.file_name[:-4].encode()
    expected = [oi.flags(original, i) for i in range(len(original.boxes))]
    assert ex["image/object/is_crowd"] == [g for _, _, g in expected], im.file_name
    assert ex["image/object/truncated"] == [t for _, t, _ in expected], im.file_name
  assert run.errors == []


@pytest.mark.e2e
def test_v7_descriptions_split_from_file_name_and_shared_names(small_dataset, tmp_path,
                                                               capsys):
  """V7's descriptions with a header, given with --class-descriptions; one input without
  SPLIT= takes its split from its name and, without --images, its images from the folder of
  that name beside it; two machine ids sharing a display name stay two classes, each named
  with its id."""
  ds = small_dataset
  root = oi.write_openimages(ds.images, ds.image_dir, tmp_path / "oi", version="v7")
  descriptions = root / "oidv7-class-descriptions-boxable.csv"
  text = descriptions.read_text().replace("/m/0bt9lr,Dog", "/m/0bt9lr,Cat")
  descriptions.write_text(text)
  boxes = root / "validation-annotations-bbox.csv"
  run = convert(["--format", "openimages", "--input", str(boxes), "--class-descriptions",
                 str(descriptions), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  images = [im for im in oi.view(ds.images) if im.split == "validation"]
  assert images and layouts.split_counts(run) == {"validation": len(images)}
  names = {"Cat": "Cat (/m/01yrx)", "Dog": "Cat (/m/0bt9lr)", "Person": "Person"}
  renamed = [dataclasses.replace(im, boxes=[(names[b[0]], *b[1:]) for b in im.boxes])
             for im in images]
  used = sorted({b[0] for im in renamed for b in im.boxes})
  ids = {name: i for i, name in enumerate(used, start=1)}
  assert run.manifest["label_map"] == ids
  layouts.check_od_examples(run, renamed, root / "validation", ids)
  assert run.errors == []


@pytest.mark.e2e
def test_bad_rows_become_error_records(small_dataset, tmp_path):
  """An unknown LabelName, a coordinate that is no number, a row of the wrong width (object
  level, at their line), a Confidence 0 row (a warning; its image kept without a box) and an
  ImageID that leaves the image root (image level): the rest is converted."""
  ds = small_dataset
  root = oi.write_openimages(ds.images, ds.image_dir, tmp_path / "oi")
  boxes = root / "validation-annotations-bbox.csv"
  lines = boxes.read_text().splitlines()
  images = [im for im in oi.view(ds.images) if im.split == "validation"]
  first, second = images[0], images[1]
  one, two = first.file_name[:-4], second.file_name[:-4]
  extra = [f"{one},xclick,/m/0zzzz,1,0.1,0.2,0.1,0.2,0,0,0,0,0",
           f"{one},xclick,/m/01yrx,1,0.1,wide,0.1,0.2,0,0,0,0,0",
           f"{two},xclick,/m/01yrx,1,0.1,0.2,0.1",
           "4f3e2d1c0b0a0908,verification,/m/01yrx,0,0.1,0.2,0.1,0.2,0,0,0,0,0",
           "../escape,xclick,/m/01yrx,1,0.1,0.2,0.1,0.2,0,0,0,0,0"]
  boxes.write_text("\n".join(lines + extra) + "\n")
  (root / "validation" / "4f3e2d1c0b0a0908.jpg").write_bytes(
      (ds.image_dir / ds.images[0].file_name).read_bytes())
  run = convert(["--input", f"validation={boxes}", "--images", str(root / "validation"),
                 "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  n = len(lines)
  got = sorted((e["reason"], e["level"], e["key"], e["source"]) for e in run.errors)
  assert got == sorted([
      ("unknown_class", "object", f"{one}.jpg", f"{boxes}:{n + 1}"),
      ("wrong_type", "object", f"{one}.jpg", f"{boxes}:{n + 2}"),
      ("malformed_row", "object", f"{two}.jpg", f"{boxes}:{n + 3}"),
      ("negative_label", "warning", "4f3e2d1c0b0a0908.jpg", f"{boxes}:{n + 4}"),
      ("path_traversal", "image", "../escape.jpg", f"{boxes}:{n + 5}")])
  assert "LabelName /m/0zzzz" in run.errors_where(reason="unknown_class")[0]["message"]
  assert "/m/01yrx (Cat)" in run.errors_where(reason="negative_label")[0]["message"]
  examples = run.by_filename()
  assert sorted(examples) == sorted([im.file_name for im in images] + ["4f3e2d1c0b0a0908.jpg"])
  assert examples["4f3e2d1c0b0a0908.jpg"]["image/object/class/text"] == []
  layouts.check_od_examples(dataclasses.replace(run, examples=[
      e for e in run.examples if e["filename"] != "4f3e2d1c0b0a0908.jpg"]), images,
      root / "validation", IDS)


def _read(inputs, classes, tmp_path, name, **options):
  """(sorted image reprs, sorted error JSON) of ReadOpenImages on the FnApiRunner."""
  import apache_beam as beam
  out_dir = tmp_path / f"out-{name}"
  p = beam.Pipeline("FnApiRunner")
  out = p | openimages.ReadOpenImages(inputs, classes, **options)
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
def test_ranges_cut_images_and_both_paths_agree(tmp_path):
  """A file read in byte ranges of 256 bytes (every image's rows cut by some edge), on the
  distributed path (GroupByKey) and the in-process spill join: the same images, objects in
  file order, and the same errors at the same file lines as one whole-file read."""
  import json
  lines = [oi.HEADER + "," + ",".join(oi.CLICKS)]
  path = tmp_path / "oidv6-train-annotations-bbox.csv"
  objects = {}
  bad = []
  mids = list(CLASSES)
  for i in range(120):
    image_id = f"{i // 4:016x}"
    if i % 17 == 5:
      lines.append(f"{image_id},xclick,/m/unknown,1,0.1,0.2,0.3,0.4,0,0,0,0,0" + ",0" * 8)
      bad.append(len(lines))
      continue
    x0, y0 = round(i / 200, 6), round(i / 300, 6)
    mid = mids[i % 3]
    lines.append(f"{image_id},xclick,{mid},1,{x0:.6f},{x0 + 0.25:.6f},{y0:.6f},{y0 + 0.5:.6f},"
                 f"0,{i % 2},{int(i % 5 == 0)},0,0" + ",0.500000" * 8)
    box = Box(x0, y0, round(x0 + 0.25, 6), round(y0 + 0.5, 6), normalized=True)
    objects.setdefault(image_id, []).append(ObjectAnnotation(
        CLASSES[mid], box, is_crowd=i % 5 == 0, truncated=bool(i % 2)))
  path.write_text("\n".join(lines) + "\n")
  expected = sorted(repr(ImageAnnotation(
      key=f"{image_id}.jpg", uri=str(tmp_path / f"{image_id}.jpg"), source_id=image_id,
      source=str(path), objects=tuple(found), split="train"))
      for image_id, found in objects.items())
  inputs = [("train", str(path), str(tmp_path))]
  whole = _read(inputs, CLASSES, tmp_path, "whole", in_process=False)
  ranges = _read(inputs, CLASSES, tmp_path, "ranges", split_bytes=256)
  spilled = _read(inputs, CLASSES, tmp_path, "spilled", in_process=True, split_bytes=256)
  assert path.stat().st_size > 40 * 256  # many ranges, each image's four rows cut somewhere
  assert whole == ranges == spilled
  images, errors = whole
  assert images == expected
  errors = [json.loads(e) for e in errors]
  assert sorted(e["source"] for e in errors) == sorted(f"{path}:{line}" for line in bad)
  assert {(e["reason"], e["level"]) for e in errors} == {("unknown_class", "object")}


@pytest.mark.e2e
def test_an_image_over_the_bound_is_one_error_in_every_path(tmp_path):
  """500,000 rows for one image took 1.18 GB and wrote an 18 MB record: an image of BOUND + 1
  rows, cut by range edges, is one too_many_objects error at its first row, alike on the
  GroupByKey path and the in-process spill join (neither holds more of it than the bound); an
  image of BOUND rows keeps every box."""
  import json

  from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE as BOUND
  row = ",xclick,/m/01yrx,1,0.1,0.2,0.1,0.2,0,0,0,0,0"
  lines = [oi.HEADER, "0000000000000001" + row]
  lines += ["00000000000000aa" + row] * (BOUND + 1) + ["00000000000000bb" + row] * BOUND
  path = tmp_path / "validation-annotations-bbox.csv"
  path.write_text("\n".join(lines) + "\n")
  inputs = [("validation", str(path), str(tmp_path))]
  whole = _read(inputs, CLASSES, tmp_path, "whole", in_process=False)
  ranges = _read(inputs, CLASSES, tmp_path, "ranges", split_bytes=1 << 16)
  spilled = _read(inputs, CLASSES, tmp_path, "spilled", in_process=True, split_bytes=1 << 16)
  assert whole == ranges == spilled
  images, errors = whole
  [error] = [json.loads(e) for e in errors]
  assert (error["reason"], error["level"], error["key"], error["source"]) == (
      "too_many_objects", "image", "00000000000000aa.jpg", f"{path}:3")
  assert [image.split("key='")[1].split("'")[0] for image in images] == [
      "0000000000000001.jpg", "00000000000000bb.jpg"]
  assert images[1].count("ObjectAnnotation(") == BOUND


# ---------------------------------------------------------------------------------------------
# Command lines


@pytest.mark.e2e
def test_bad_command_lines_exit_2_with_one_line(small_dataset, tmp_path, capsys):
  ds = small_dataset
  root = oi.write_openimages(ds.images, ds.image_dir, tmp_path / "oi")
  boxes = root / "validation-annotations-bbox.csv"
  base = ["--format", "openimages", "--input", str(boxes), "--output", str(tmp_path / "o")]
  (root / "class-descriptions-boxable.csv").rename(tmp_path / "descriptions.csv")
  cases = [
      (base, "give --class-descriptions"),
      (base + ["--class-descriptions", str(tmp_path / "none.csv")],
       "--class-descriptions " + str(tmp_path / "none.csv") + ": no such file"),
      (["--format", "openimages", "--input", str(ds.csv_file("val")), "--class-descriptions",
        str(tmp_path / "descriptions.csv"), "--output", str(tmp_path / "o")],
       "is not an Open Images box CSV"),
      (base + ["--class-descriptions", str(tmp_path / "descriptions.csv"), "--classes-file",
               str(tmp_path / "descriptions.csv")], "--classes-file applies to --format "
       "yolo-keras only"),
  ]
  (tmp_path / "bad.csv").write_text("/m/01yrx,Cat,Felis\n")
  cases.append((base + ["--class-descriptions", str(tmp_path / "bad.csv")],
                "line 1: expected LabelName,DisplayName"))
  for args, message in cases:
    run = convert(args + [RUNNER], capsys)
    assert run.code == 2, (args, run.stderr)
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    assert not (tmp_path / "o").exists()


def test_launcher_reads_only_the_head(tmp_path, monkeypatch):
  """check reads DETECT_HEAD_BYTES of the box file, however big it is; a descriptions file over
  its budget is a usage error."""
  from beam_tfrecord.storage import files
  path = tmp_path / "test-annotations-bbox.csv"
  path.write_text(oi.HEADER + "\n" + "00,xclick,/m/01yrx,1,0.1,0.2,0.1,0.2,0,0,0,0,0\n" * 5000)
  reads = []
  real_head = files.head
  monkeypatch.setattr(files, "head", lambda uri, size=4096: reads.append(size)
                      or real_head(uri, size))
  openimages.check_input(str(path))
  assert reads == [openimages.DETECT_HEAD_BYTES]
  (tmp_path / "d.csv").write_text("/m/01yrx,Cat\n" * 10)
  monkeypatch.setattr(openimages, "MAX_DESCRIPTIONS_BYTES", 64)
  with pytest.raises(UsageError, match="more than 64 bytes"):
    openimages.load_descriptions(str(tmp_path / "d.csv"))

"""End-to-end: the real pipeline on generated JPEG/PNG images, read back with TensorFlow.

Every run converts the 27-image dataset of conftest.py (or a small private one) and every
example is compared feature by feature with the input images and annotations.
"""
from __future__ import annotations

import collections
from pathlib import Path
from typing import Dict

import layouts
import pytest
from bad_data import RUNNER, convert
from conftest import (BASE_FEATURES, VOC_FEATURES, Dataset, Output, Record,
                      check_all_images, check_manifest, check_record,
                      expected_for, read_output, record_counts, run_cli,
                      run_python, source_id_for, tensor_to_python)

from beam_tfrecord import config as config_mod
from beam_tfrecord import sample
from beam_tfrecord.finalize import card
from beam_tfrecord.plan import naming, shard_plan

FORMATS = ("coco", "voc", "csv")


def _default_ids(ds, fmt) -> Dict[str, int]:
  """Label ids the documented defaults give: COCO keeps its ids, VOC/CSV sorted names 1..N."""
  return ds.coco_category_ids() if fmt == "coco" else ds.sorted_name_ids()


def _write_label_map(path: Path, ids: Dict[str, int]) -> str:
  """A label map in the TF OD API's own style, written by hand (not by the library)."""
  path.write_text("".join(f"item {{\n  name: '{name}'\n  id: {i}\n  display_name: '{name}'\n}}\n"
                          for name, i in ids.items()), encoding="utf-8")
  return str(path)


# ---------------------------------------------------------------------------------------------
# The runs (each built once per session, see conftest.Shared)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def format_output(shared, dataset):
  """The dataset converted from each format with default options on the DirectRunner."""
  def get(fmt: str) -> Output:
    return shared.output(fmt, lambda out: run_cli(
        "convert", f"--format={fmt}", *dataset.inputs(fmt), f"--output={out}",
        "--runner=DirectRunner"))
  return get


@pytest.fixture(scope="session")
def coco_sorted_ids_output(shared, dataset):
  """COCO with a --label-map giving the VOC/CSV ids, so all formats can be compared."""
  def build(out: Path):
    label_map = _write_label_map(out.parent / "sorted_ids.pbtxt", dataset.sorted_name_ids())
    run_cli("convert", "--format=coco", *dataset.inputs("coco"), f"--output={out}",
            f"--label-map={label_map}", "--runner=FnApiRunner")
  return shared.output("coco_sorted_ids", build)


# ---------------------------------------------------------------------------------------------
# Each format: every feature of every example
# ---------------------------------------------------------------------------------------------

def test_dataset_covers_the_interesting_cases(dataset):
  """The checks below only mean something if the input has these cases."""
  formats = collections.Counter(im.format for im in dataset.images)
  assert formats["jpeg"] >= 5 and formats["png"] >= 5
  assert any(im.format == "png" and im.file_name.endswith(".jpg") for im in dataset.images)
  assert sum(1 for im in dataset.images if not im.boxes) >= 3
  assert any(len(im.boxes) >= 3 for im in dataset.images)
  assert any(not name.isascii() for name in (im.file_name for im in dataset.images))
  assert set(dataset.splits) == {"train", "val"}
  ids = dataset.coco_category_ids()
  assert sorted(ids.values()) != list(range(1, len(ids) + 1)), "COCO ids should have gaps"


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_feature_matches_the_input(format_output, dataset, fmt):
  out = format_output(fmt)
  # COCO objects are compared as a set here; their order is test_coco_object_order below
  check_all_images(out, dataset, fmt, _default_ids(dataset, fmt), any_order=(fmt == "coco"))
  # default shard size (150 MB): one shard per split for this small dataset
  assert {split: len(files) for split, files in out.shard_files.items()} == \
      {split: 1 for split in dataset.splits}


@pytest.mark.parametrize("fmt", FORMATS)
def test_manifest_and_label_map(format_output, dataset, fmt):
  out = format_output(fmt)
  check_manifest(out, dataset, fmt, _default_ids(dataset, fmt))
  assert out.errors == []


def test_coco_keeps_category_ids_with_gaps(format_output, dataset):
  out = format_output("coco")
  ids = dataset.coco_category_ids()
  labels = {(t.decode(), label) for _, r in out.all_records()
            for t, label in zip(r.values["image/object/class/text"],
                                r.values["image/object/class/label"])}
  assert labels == set(ids.items())
  assert out.manifest["label_map"] == ids


def test_voc_and_csv_get_sorted_names(format_output, dataset):
  names = dataset.class_names()
  for fmt in ("voc", "csv"):
    assert format_output(fmt).manifest["label_map"] == {n: i + 1 for i, n in enumerate(names)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_back_with_reader_load(format_output, dataset, fmt):
  """beam_tfrecord.readback.reader.load gives the same values as a hand-written feature spec."""
  from beam_tfrecord import reader
  out = format_output(fmt)
  by_name = dataset.by_name()
  seen = []
  for split in dataset.splits:
    for example in reader.load(str(out.path), split):
      values = {k: tensor_to_python(v) for k, v in example.items()}
      name = values["image/filename"].decode("utf-8")
      seen.append(name)
      im = by_name[name]
      assert im.split == split
      n = len(im.boxes)
      present = set(BASE_FEATURES) | (set(VOC_FEATURES) if fmt == "voc" and n else set())
      record = Record("reader.load", b"", frozenset(present), values)
      for key in set(VOC_FEATURES) - present:  # absent per-object keys read back as empty
        assert values[key] == [], key
      check_record(record, expected_for(dataset, im, source_id_for(fmt, im)),
                   _default_ids(dataset, fmt), voc=(fmt == "voc"), any_order=(fmt == "coco"))
  assert sorted(seen) == sorted(by_name)


# ---------------------------------------------------------------------------------------------
# The same dataset as COCO, VOC and CSV gives the same examples
# ---------------------------------------------------------------------------------------------

COMPARED = sorted(set(BASE_FEATURES) - {"image/source_id"})


def test_voc_and_csv_give_the_same_examples(format_output):
  voc, csv = format_output("voc").by_filename(), format_output("csv").by_filename()
  assert sorted(voc) == sorted(csv)
  for name in voc:
    (vsplit, v), (csplit, c) = voc[name], csv[name]
    assert vsplit == csplit
    for key in COMPARED + ["image/source_id"]:  # VOC and CSV both use the file name
      assert v.values[key] == c.values[key], (name, key)
    assert c.keys == frozenset(BASE_FEATURES)


def _objects(values, with_area=False):
  rows = list(zip(values["image/object/class/text"], values["image/object/class/label"],
                  values["image/object/bbox/xmin"], values["image/object/bbox/ymin"],
                  values["image/object/bbox/xmax"], values["image/object/bbox/ymax"],
                  values["image/object/is_crowd"]))
  return sorted((t, label, round(a, 6), round(b, 6), round(c, 6), round(d, 6), crowd)
                for t, label, a, b, c, d, crowd in rows)


def test_coco_gives_the_same_examples_as_voc_and_csv(coco_sorted_ids_output, format_output,
                                                     dataset):
  coco = coco_sorted_ids_output.by_filename()
  check_all_images(coco_sorted_ids_output, dataset, "coco", dataset.sorted_name_ids(),
                   any_order=True)
  for fmt in ("voc", "csv"):
    other = format_output(fmt).by_filename()
    assert sorted(coco) == sorted(other)
    for name, (split, c) in coco.items():
      osplit, o = other[name]
      assert split == osplit
      for key in COMPARED:
        if key.startswith("image/object/"):
          continue
        assert c.values[key] == o.values[key], (fmt, name, key)
      assert _objects(c.values) == _objects(o.values), (fmt, name)
      assert sorted(c.values["image/object/area"]) == pytest.approx(
          sorted(o.values["image/object/area"]), rel=1e-5)


def test_coco_object_order_follows_the_annotation_file(format_output, dataset):
  out = format_output("coco")
  check_all_images(out, dataset, "coco", dataset.coco_category_ids(), any_order=False)


def test_csv_column_mapping_and_split_column_on_test_pipeline(shared, dataset, format_output):
  """Renamed, reordered columns with a split column, through pipeline.build on a TestPipeline:
  the shards are byte-identical to those of the standard CSV layout."""
  import csv

  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that

  from beam_tfrecord import pipeline
  total = len(dataset.images)

  def build(out: Path):
    mapped = out.parent / "mapped_labels.csv"
    with open(mapped, "w", newline="", encoding="utf-8") as f:
      w = csv.writer(f)
      w.writerow(["note", "Y2", "label", "X1", "subset", "path", "X2", "Y1", "H", "W"])
      for im in dataset.images:
        for label, x0, y0, x1, y1 in im.boxes or [("", "", "", "", "")]:
          w.writerow(["-", y1, label, x0, im.split, im.file_name, x1, y0, im.height, im.width])
    out.mkdir()
    config = config_mod.ConvertConfig(
        format="csv", inputs=[str(mapped)], images=[str(dataset.image_dir)], output=str(out),
        csv_columns="filename=path,class=label,xmin=X1,ymin=Y1,xmax=X2,ymax=Y2,width=W,"
        "height=H,split=subset")

    def check(manifests):
      [m] = manifests
      assert m["totals"]["examples"] == total, m["totals"]
      assert sorted(m["splits"]) == ["train", "val"]

    with TestPipeline(runner="FnApiRunner", argv=[]) as p:
      assert_that(pipeline.build(p, config), check)

  out = read_output(shared.build("csv_mapped", build))
  reference = format_output("csv")
  assert sorted(out.shard_files) == sorted(reference.shard_files)
  for split, files in reference.shard_files.items():
    assert [f.name for f in out.shard_files[split]] == [f.name for f in files]
    for a, b in zip(files, out.shard_files[split]):
      assert a.read_bytes() == b.read_bytes(), a.name
  assert out.manifest["splits"] == reference.manifest["splits"]


# ---------------------------------------------------------------------------------------------
# Determinism and sharding
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def four_shards(shared, dataset):
  """--num-shards 4: once in this process, once in a subprocess with another hash seed and
  the DirectRunner's multi-threaded mode."""
  args = ["convert", "--format=coco", *dataset.inputs("coco"), "--num-shards=4"]

  def here(out: Path):
    run_cli(*args, f"--output={out}", "--runner=DirectRunner")

  def there(out: Path):
    result = run_python(["-m", "beam_tfrecord.cli", *args, f"--output={out}",
                         "--runner=DirectRunner", "--direct_running_mode=multi_threading",
                         "--direct_num_workers=2"], PYTHONHASHSEED="4242")
    assert result.returncode == 0, result.stderr[-3000:]

  return shared.output("four_shards_a", here), shared.output("four_shards_b", there)


def test_two_runs_give_byte_identical_output(four_shards):
  a, b = four_shards
  files_a = sorted(f.name for f in a.path.iterdir())
  assert files_a == sorted(f.name for f in b.path.iterdir())
  for name in files_a:
    if name not in ("manifest.json", "README.md"):
      assert (a.path / name).read_bytes() == (b.path / name).read_bytes(), name
  # the card, like the manifest, says when, where and how: it is its manifest's rendering
  for out in (a, b):
    assert (out.path / "README.md").read_text(encoding="utf-8") == card.render(out.manifest)

  def stable(m):
    config = {k: v for k, v in m["config"].items() if k != "output"}
    return {**{k: v for k, v in m.items() if k not in ("created", "args", "run_id")},
            "config": config}
  assert stable(a.manifest) == stable(b.manifest)
  assert a.manifest["splits"]["train"]["num_shards"] == 4


def test_num_shards_balance_and_shard_order(four_shards, dataset):
  out = four_shards[0]
  check_all_images(out, dataset, "coco", dataset.coco_category_ids(), any_order=True)
  check_manifest(out, dataset, "coco", dataset.coco_category_ids())
  for split in dataset.splits:
    count = sum(1 for im in dataset.images if im.split == split)
    files = out.shard_files[split]
    assert len(files) == min(4, count)
    assert all(f.name.endswith(f"-of-{len(files):05d}.tfrecord") for f in files)
    counts = record_counts(out, split)
    assert sum(counts) == count and max(counts) - min(counts) <= 1, counts
    # examples are in shard order (the hash of the key), within and across shards: a
    # well-mixed sample of the split in every shard, not a run of neighbouring names
    from beam_tfrecord.records.packed import identity_hash
    names = [r.values["image/filename"].decode() for r in out.records[split]]
    assert names == sorted(names, key=lambda n: (identity_hash(n), n)) != sorted(names)
  # 14 and 13 images in 4 shards: the "at most one" really is exercised
  assert any(max(record_counts(out, s)) > min(record_counts(out, s)) for s in dataset.splits)




# ---------------------------------------------------------------------------------------------
# Label maps, sinks, errors
# ---------------------------------------------------------------------------------------------

def test_user_label_map_overrides_ids_and_reports_unknown_classes(shared, dataset):
  user_ids = {"person": 3, "cat": 7}   # no "dog"; COCO's own ids would be 1 and 17
  assert "dog" in dataset.class_names()

  def build(out: Path):
    label_map = _write_label_map(out.parent / "user_map.pbtxt", user_ids)
    run_cli("convert", "--format=coco", *dataset.inputs("coco"), f"--output={out}",
            f"--label-map={label_map}", "--runner=FnApiRunner")

  out = shared.output("user_map", build)
  dogs = [(im.file_name, box) for im in dataset.images for box in im.boxes if box[0] == "dog"]
  assert dogs
  keep = lambda label: label != "dog"  # noqa: E731
  # every image is still written; dog objects are left out, the others get the user's ids
  check_all_images(out, dataset, "coco", user_ids, keep=keep, any_order=True)
  check_manifest(out, dataset, "coco", user_ids, keep=keep,
                 errors_by_reason={"unknown_class": len(dogs)})
  assert sorted((e["key"], e["reason"], e["stage"]) for e in out.errors) == \
      sorted((name, "unknown_class", "validate") for name, _ in dogs)
  assert all("dog" in e["message"] and e["level"] == "object" for e in out.errors)
  assert out.manifest["errors"]["by_level"] == {"object": len(dogs)}
  assert {e["source"] for e in out.errors} <= {str(dataset.coco_file(s)) for s in dataset.splits}
  only_dogs = [im.file_name for im in dataset.images
               if im.boxes and all(b[0] == "dog" for b in im.boxes)]
  for name in only_dogs:
    assert out.by_filename()[name][1].values["image/object/class/text"] == []


def test_beam_sink_writes_the_same_examples(shared, dataset, format_output):
  out = shared.output("beam_sink", lambda o: run_cli(
      "convert", "--format=coco", *dataset.inputs("coco"), f"--output={o}", "--sink=beam",
      "--num-shards=2", "--runner=FnApiRunner"))
  reference = format_output("coco")
  for split in dataset.splits:
    assert [f.name for f in out.shard_files[split]] == \
        [naming.shard_name(split, i, 2) for i in range(2)]
    assert collections.Counter(r.serialized for r in out.records[split]) == \
        collections.Counter(r.serialized for r in reference.records[split])
  check_all_images(out, dataset, "coco", dataset.coco_category_ids(), any_order=True)
  check_manifest(out, dataset, "coco", dataset.coco_category_ids(), sink="beam")


def _rewrite_csv(ds, mutate):
  """Rewrite every CSV of a dataset, passing each row (a dict) through mutate."""
  import csv
  for split in ds.splits:
    path = ds.csv_file(split)
    with open(path, newline="", encoding="utf-8") as f:
      rows = list(csv.DictReader(f))
    rows = [mutate(dict(r)) for r in rows]
    with open(path, "w", newline="", encoding="utf-8") as f:
      w = csv.DictWriter(f, fieldnames=list(rows[0]))
      w.writeheader()
      w.writerows(rows)


def test_bbox_policy_error_rejects_the_image(small_dataset, tmp_path):
  ds = small_dataset
  victim = next(im for im in ds.images if im.boxes)

  def widen(row):
    if row["filename"] == victim.file_name:
      row["xmax"] = str(victim.width + 25)   # partly outside the image
    return row

  _rewrite_csv(ds, widen)
  out_dir = tmp_path / "out"
  run_cli("convert", "--format=csv", *ds.inputs("csv"), f"--output={out_dir}",
          "--bbox-policy=error", "--runner=FnApiRunner")
  out = read_output(out_dir)
  written = out.by_filename()
  assert sorted(written) == sorted(im.file_name for im in ds.images if im is not victim)
  assert [(e["key"], e["reason"], e["level"]) for e in out.errors] == \
      [(victim.file_name, "bbox_partly_outside", "image")]
  assert out.manifest["totals"]["examples"] == len(ds.images) - 1
  assert out.manifest["errors"]["by_reason"] == {"bbox_partly_outside": 1}


def test_csv_split_value_cannot_write_outside_the_output(small_dataset, tmp_path):
  """A split comes from data (a CSV column); it must not steer files out of --output."""
  ds = small_dataset
  first = ds.images[0].file_name

  def evil(row):
    row["split"] = "../escaped" if row["filename"] == first else row.get("split") or "train"
    return row

  _rewrite_csv(ds, evil)
  out_dir = tmp_path / "work" / "out"
  try:
    run_cli("convert", "--format=csv", *ds.inputs("csv"), f"--output={out_dir}",
            "--runner=FnApiRunner")
  except (ValueError, AssertionError, SystemExit):
    pass  # refusing the run is an acceptable answer too
  outside = [p for p in tmp_path.rglob("*.tfrecord") if out_dir not in p.parents]
  assert outside == [], f"written outside {out_dir}: {outside}"


def test_missing_and_unsafe_images_become_error_records(small_dataset, tmp_path):
  """Missing files and names escaping the image root are reported; the rest is converted."""
  ds = small_dataset
  missing, escaping = ds.images[0], ds.images[1]
  (ds.image_dir / missing.file_name).unlink()
  secret = tmp_path / "secret.jpg"
  secret.write_bytes((ds.image_dir / escaping.file_name).read_bytes())

  def mutate(row):
    if row["filename"] == escaping.file_name:
      row["filename"] = "../secret.jpg"
    return row

  _rewrite_csv(ds, mutate)
  out_dir = tmp_path / "out"
  run_cli("convert", "--format=csv", *ds.inputs("csv"), f"--output={out_dir}",
          "--runner=FnApiRunner")
  out = read_output(out_dir)
  assert sorted(out.by_filename()) == sorted(im.file_name for im in ds.images[2:])
  assert sorted((e["reason"], e["key"]) for e in out.errors) == \
      sorted([("missing_image", missing.file_name), ("path_traversal", "../secret.jpg")])
  assert out.manifest["errors"]["count"] == len(out.errors)


def test_merging_two_coco_datasets_whose_folders_use_the_same_file_names(tmp_path):
  """Issue 8 item 5: images are identified by their resolved URI, not their file name. Two
  COCO exports, each next to its own images folder with the same file names (and image ids),
  merged into one split: every image of both is written once, and the run succeeds."""
  parts = []
  for name, seed in (("a", 1), ("b", 2)):
    root = tmp_path / name
    images = sample.make_images(str(root), 16, seed, splits=("train",))
    ann = Path(sample.write_coco(str(root), images, "train"))
    ann.rename(root / "images" / "instances.json")  # the image root defaults to its folder
    parts.append(Dataset(root, images))
  out = tmp_path / "out"
  run_cli("convert", "--format=coco", f"--input={parts[0].image_dir / 'instances.json'}",
          f"--input={parts[1].image_dir / 'instances.json'}", "--num-shards=3",
          f"--output={out}", "--runner=FnApiRunner")
  written = read_output(out)
  assert written.manifest["status"] == "ok"
  assert written.manifest["totals"]["examples"] == 32 and written.errors == []
  records = {(r.values["image/filename"].decode(), r.values["image/encoded"]): r
             for _, r in written.all_records()}
  assert len(records) == 32 == len(written.all_records())
  ids = dict(sample.COCO_IDS)
  for ds in parts:
    for im in ds.images:
      record = records[(im.file_name, ds.data(im))]
      check_record(record, expected_for(ds, im, str(im.image_id)), ids, voc=False)
  assert record_counts(written, "train") == shard_plan.shard_lengths(32, 3)


# ---------------------------------------------------------------------------------------------
# The same dataset as COCO, VOC, CSV and YOLO
# ---------------------------------------------------------------------------------------------


def test_same_dataset_as_coco_voc_csv_yolo_gives_same_examples(dataset, tmp_path,
                                                               coco_sorted_ids_output,
                                                               format_output):
  """One dataset in four formats, one label map: the same images, splits, classes, ids and
  boxes (to 1e-5) whatever the format."""
  from bad_data import Run, read_errors, read_examples
  ids = {"cat": 1, "dog": 2, "person": 3}
  label_map = str(layouts.write_label_map(tmp_path / "map.pbtxt", ids))
  yaml_path = layouts.write_ultralytics(dataset.images, dataset.image_dir, tmp_path / "yolo")
  # COCO with this label map is the session's coco_sorted_ids run (the same ids, FnApiRunner);
  # VOC and CSV with it are their default runs (sorted names 1..N: these very ids)
  assert dataset.sorted_name_ids() == ids
  shared = {"coco": coco_sorted_ids_output, "voc": format_output("voc"),
            "csv": format_output("csv")}
  runs = {fmt: Run(0, str(out.path), out.manifest, read_errors(str(out.path)),
                   read_examples(str(out.path), out.manifest)) for fmt, out in shared.items()}
  for fmt in shared:
    assert runs[fmt].manifest["label_map"] == ids, fmt
    layouts.check_od_examples(runs[fmt], dataset.images, dataset.image_dir, ids)
  runs["yolo"] = convert(["--format", "yolo", f"--input={yaml_path}", "--label-map", label_map,
                          "--output", str(tmp_path / "out" / "yolo"), RUNNER])
  assert runs["yolo"].code == 0
  layouts.check_od_examples(runs["yolo"], dataset.images, dataset.image_dir, ids)

  def essence(run):
    result = {}
    for ex in run.examples:
      boxes = tuple(zip(ex["image/object/class/text"], ex["image/object/class/label"],
                        *(tuple(round(v, 5) for v in ex[f"image/object/bbox/{k}"])
                          for k in ("xmin", "ymin", "xmax", "ymax"))))
      result[ex["filename"].rsplit("/", 1)[-1]] = (
          ex["split"], ex["image/encoded"], ex["image/format"], ex["image/width"],
          ex["image/height"], ex["image/channels"], ex["image/key/sha256"], boxes)
    return result

  reference = essence(runs["coco"])
  for fmt in ("voc", "csv", "yolo"):
    assert essence(runs[fmt]) == reference, fmt
  assert {layouts.split_counts(r) == layouts.split_counts(runs["coco"]) for r in runs.values()} \
      == {True}

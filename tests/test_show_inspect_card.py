"""show, inspect, the dataset card and progress in images (issue 12).

Pictures are checked pixel by pixel: a box edge must have its class colour where the box's
coordinates put it. Every schema a manifest may declare (od_api, classification, tutorial,
coco-objects, renamed features) is covered by outputs written here by hand with TensorFlow's
own tf.train.Example and TFRecordWriter, next to real pipeline outputs for od_api.
"""
from __future__ import annotations

import collections
import io
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from conftest import Dataset, make_dataset, run_cli, run_python
from PIL import Image, ImageDraw

from beam_tfrecord import cli
from beam_tfrecord import config as config_mod
from beam_tfrecord import sample
from beam_tfrecord.finalize import card, progress
from beam_tfrecord.plan import transform as plan_stage
from beam_tfrecord.prepare import labels as label_stage
from beam_tfrecord.prepare import locate
from beam_tfrecord.sources import registry
from beam_tfrecord.readback import show, stats, views
from beam_tfrecord.readback.reader import show as reader_show

GRAY = (128, 128, 128)


def _png(image: Image.Image) -> bytes:
  buf = io.BytesIO()
  image.save(buf, format="PNG")
  return buf.getvalue()


def _gray(width: int, height: int) -> bytes:
  return _png(Image.new("RGB", (width, height), GRAY))


# ---------------------------------------------------------------------------------------------
# Hand-written outputs of each schema
# ---------------------------------------------------------------------------------------------

def _feature(value):
  import tensorflow as tf
  values = value if isinstance(value, list) else [value]
  if all(isinstance(v, bytes) for v in values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
  if all(isinstance(v, int) for v in values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def write_output(root: Path, schema: str, features: Dict[str, Tuple[str, str]],
                 records: Dict[str, List[Dict]], label_map: Dict[str, int],
                 renames: Optional[Dict[str, str]] = None) -> Path:
  """Shards + manifest.json as the finalize step writes them, records made with tf.train."""
  import tensorflow as tf
  root.mkdir(parents=True)
  splits = {}
  for split, examples in records.items():
    name = f"{split}-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(root / name)) as writer:
      for ex in examples:
        writer.write(tf.train.Example(features=tf.train.Features(
            feature={k: _feature(v) for k, v in ex.items()})).SerializeToString())
    size = (root / name).stat().st_size
    splits[split] = {"examples": len(examples), "objects": 0, "bytes": size, "classes": {},
                     "num_shards": 1,
                     "shards": [{"path": name, "examples": len(examples), "bytes": size}]}
  manifest = {"tool": "beam-tfrecord", "version": "0.1.0", "status": "ok", "schema": schema,
              "format": "coco", "created": "2026-01-01T00:00:00+00:00",
              "config": {"output": str(root)},
              "features": {k: {"dtype": d, "kind": kind} for k, (d, kind) in features.items()},
              "label_map": label_map, "splits": splits,
              "totals": {"examples": sum(s["examples"] for s in splits.values())},
              "errors": {"count": 0, "by_reason": {}}}
  if renames:
    manifest["feature_names"] = renames
  (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
  return root


# Boxes in pixels (label, x0, y0, x1, y1), far apart so no label patch covers another's edge.
OD_BOXES = [("cat", 20, 40, 90, 110), ("dog", 120, 50, 190, 140)]
OD_SIZE = (220, 160)
LABELS = {"cat": 1, "dog": 2, "person": 3}


def _mask(width: int, height: int, box) -> bytes:
  """Instance mask as the TF OD API stores it: an image-sized PNG, 1 inside the object."""
  mask = Image.new("L", (width, height), 0)
  ImageDraw.Draw(mask).rectangle([box[1] + 10, box[2] + 10, box[3] - 10, box[4] - 10], fill=1)
  return _png(mask)


def _od_records(with_masks: bool) -> List[Dict]:
  w, h = OD_SIZE
  rec = {"image/encoded": _gray(w, h), "image/format": b"png", "image/height": h,
         "image/width": w, "image/filename": b"two.png",
         "image/object/bbox/xmin": [b[1] / w for b in OD_BOXES],
         "image/object/bbox/ymin": [b[2] / h for b in OD_BOXES],
         "image/object/bbox/xmax": [b[3] / w for b in OD_BOXES],
         "image/object/bbox/ymax": [b[4] / h for b in OD_BOXES],
         "image/object/class/text": [b[0].encode() for b in OD_BOXES],
         "image/object/class/label": [LABELS[b[0]] for b in OD_BOXES]}
  if with_masks:
    rec["image/object/mask"] = [_mask(w, h, b) for b in OD_BOXES]
  return [rec]


OD_FEATURES = {"image/encoded": ("string", "fixed"), "image/format": ("string", "fixed"),
               "image/height": ("int64", "fixed"), "image/width": ("int64", "fixed"),
               "image/filename": ("string", "fixed"),
               **{f"image/object/bbox/{k}": ("float32", "var")
                  for k in ("xmin", "ymin", "xmax", "ymax")},
               "image/object/class/text": ("string", "var"),
               "image/object/class/label": ("int64", "var"),
               "image/object/mask": ("string", "var")}


def od_api_output(root: Path) -> Path:
  return write_output(root, "od_api", OD_FEATURES, {"train": _od_records(True)}, LABELS)


def renamed_output(root: Path) -> Path:
  """od_api written with --feature-names: image/encoded=jpeg, class text=names, bbox keys."""
  renames = {"image/encoded": "img", "image/object/class/text": "names",
             **{f"image/object/bbox/{k}": k for k in ("xmin", "ymin", "xmax", "ymax")}}
  records = [{renames.get(k, k): v for k, v in r.items()} for r in _od_records(False)]
  features = {renames.get(k, k): v for k, v in OD_FEATURES.items()
              if k != "image/object/mask"}
  return write_output(root, "od_api", features, {"train": records}, LABELS, renames)


CLASSIFIED = [("a.png", 120, 90, "dog"), ("b.png", 90, 140, "cat"), ("c.png", 100, 100, "dog")]


def classification_output(root: Path) -> Path:
  records = [{"image/encoded": _gray(w, h), "image/format": b"png", "image/height": h,
              "image/width": w, "image/channels": 3, "image/filename": name.encode(),
              "image/key/sha256": b"0" * 64, "image/class/label": LABELS[label],
              "image/class/text": label.encode()} for name, w, h, label in CLASSIFIED]
  features = {"image/encoded": ("string", "fixed"), "image/format": ("string", "fixed"),
              "image/height": ("int64", "fixed"), "image/width": ("int64", "fixed"),
              "image/channels": ("int64", "fixed"), "image/filename": ("string", "fixed"),
              "image/key/sha256": ("string", "fixed"), "image/class/label": ("int64", "fixed"),
              "image/class/text": ("string", "fixed")}
  return write_output(root, "classification", features, {"train": records[:2],
                                                         "val": records[2:]}, LABELS)


def tutorial_output(root: Path) -> Path:
  """The TFRecord tutorial's keys; one image as encoded bytes (the tutorial's way), one as
  raw height x width x depth pixels."""
  records = [{"height": h, "width": w, "depth": 3, "label": LABELS[label],
              "image_raw": _gray(w, h) if i == 0 else Image.new("RGB", (w, h), GRAY).tobytes()}
             for i, (_, w, h, label) in enumerate(CLASSIFIED[:2])]
  features = {"height": ("int64", "fixed"), "width": ("int64", "fixed"),
              "depth": ("int64", "fixed"), "label": ("int64", "fixed"),
              "image_raw": ("string", "fixed")}
  return write_output(root, "tutorial", features, {"train": records}, LABELS)


def coco_objects_output(root: Path) -> Path:
  """keras.io's per-object COCO records: one record per box, bbox [x, y, w, h] in pixels."""
  w, h = OD_SIZE
  image = _png(Image.new("RGB", (w, h), GRAY))
  records = [{"image": image, "path": b"two.png", "area": float((x1 - x0) * (y1 - y0)),
              "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
              "category_id": LABELS[label], "id": i, "image_id": 7}
             for i, (label, x0, y0, x1, y1) in enumerate(OD_BOXES)]
  features = {"image": ("string", "fixed"), "path": ("string", "fixed"),
              "area": ("float32", "fixed"), "bbox": ("float32", "var"),
              "category_id": ("int64", "fixed"), "id": ("int64", "fixed"),
              "image_id": ("int64", "fixed")}
  return write_output(root, "coco-objects", features, {"train": records}, LABELS)


SCHEMAS = {"od_api": od_api_output, "renamed": renamed_output,
           "classification": classification_output, "tutorial": tutorial_output,
           "coco-objects": coco_objects_output}


# ---------------------------------------------------------------------------------------------
# Pixel checks
# ---------------------------------------------------------------------------------------------

def _close(a, b, tol: int = 2) -> bool:
  return all(abs(x - y) <= tol for x, y in zip(a, b))


def assert_box_drawn(grid: Image.Image, tile: Dict, box, color, name: str) -> None:
  """The outline of box (x0, y0, x1, y1, image pixels) has `color` on its left, right and
  bottom edges (the top carries the class label), and the box is not filled."""
  s, ox, oy = tile["scale"], tile["x"], tile["y"]
  x0, y0, x1, y1 = box
  left, top = ox + round(x0 * s), oy + round(y0 * s)
  right, bottom = ox + round(x1 * s) - 1, oy + round(y1 * s) - 1
  mid_x, mid_y = (left + right) // 2, (top + bottom) // 2
  inside = 1  # the outline is show.LINE pixels wide, drawn inwards from the box's edges
  for point in ((left + inside, mid_y), (right - inside, mid_y), (mid_x, bottom - inside)):
    assert grid.getpixel(point) == color, (name, box, point, grid.getpixel(point), color)
  assert grid.getpixel((left + show.LINE + 2, mid_y)) != color, (name, box, "filled")
  assert grid.getpixel((left - 2, mid_y)) != color, (name, box, "outline outside the box")


def _tiles(grid: Image.Image) -> Dict[str, Dict]:
  return {t["name"]: t for t in grid.info["tiles"]}


@pytest.mark.parametrize("schema", list(SCHEMAS))
def test_show_draws_boxes_where_the_records_put_them(tmp_path, schema):
  out = SCHEMAS[schema](tmp_path / schema)
  manifest = json.loads((out / "manifest.json").read_text())
  grid = show.show(str(out), split="train", n=16)
  tiles = grid.info["tiles"]
  assert len(tiles) == manifest["splits"]["train"]["examples"]
  if schema in ("classification", "tutorial"):
    # The class is the whole image's: a frame in the class colour around the picture.
    wanted = {(w, h, label) for _, w, h, label in CLASSIFIED[:2]}
    seen = set()
    for tile in tiles:
      width, height = (round(v / tile["scale"]) for v in _picture_size(grid, tile))
      label = next(lab for w, h, lab in wanted if (w, h) == (width, height))
      assert_box_drawn(grid, tile, (0, 0, width, height), show.box_color(label, LABELS), schema)
      seen.add((width, height, label))
    assert seen == wanted
    return
  by_name = _tiles(grid)
  if schema == "coco-objects":  # one record, one tile, one box each
    assert len(tiles) == len(OD_BOXES)
    for tile, (label, *box) in zip(tiles, OD_BOXES):
      assert_box_drawn(grid, tile, box, show.box_color(label, LABELS), schema)
    return
  tile = by_name["two.png"]
  for label, *box in OD_BOXES:
    assert_box_drawn(grid, tile, box, show.box_color(label, LABELS), schema)
  if schema == "od_api":  # masks: translucent class colour inside, plain image outside
    for label, x0, y0, x1, y1 in OD_BOXES:
      point = (tile["x"] + round((x0 + x1) / 2 * tile["scale"]),
               tile["y"] + round((y0 + y1) / 2 * tile["scale"]))
      color = show.box_color(label, LABELS)
      blend = tuple(round(g * (1 - show.MASK_ALPHA) + c * show.MASK_ALPHA)
                    for g, c in zip(GRAY, color))
      assert _close(grid.getpixel(point), blend), (label, grid.getpixel(point), blend)
    corner = (tile["x"] + 5, tile["y"] + 5)
    assert _close(grid.getpixel(corner), GRAY)


def _picture_size(grid: Image.Image, tile: Dict) -> Tuple[int, int]:
  """Width and height of the pasted picture: the run of pixels from its origin that are
  neither the grid's background nor the outline's dark halo around the picture."""
  x, y = tile["x"], tile["y"]
  outside = (show.BACKGROUND, show.HALO)
  w = 0
  while x + w < grid.width and grid.getpixel((x + w, y + show.LINE + 1)) not in outside:
    w += 1
  h = 0
  while y + h < grid.height and grid.getpixel((x + show.LINE + 1, y + h)) not in outside:
    h += 1
  return w, h


def test_show_classification_caption_names_the_class(tmp_path):
  out = classification_output(tmp_path / "cls")
  items = show.sample(str(out), json.loads((out / "manifest.json").read_text()), "train", 5, 0)
  assert sorted((i.name, i.caption) for i in items) == [("a.png", "dog"), ("b.png", "cat")]
  assert all(not i.boxes for i in items)


def test_views_resolve_renames_and_unknown_schema_names():
  manifest = {"schema": "od_api", "features": {
      "img": {}, "xmin": {}, "ymin": {}, "xmax": {}, "ymax": {}, "image/height": {},
      "image/width": {}}, "feature_names": ["image/encoded=img", "image/object/bbox/xmin=xmin",
                                             "image/object/bbox/ymin=ymin",
                                             "image/object/bbox/xmax=xmax",
                                             "image/object/bbox/ymax=ymax"]}
  view = views.resolve(manifest)
  assert view.image == "img" and view.boxes == ("xmin", "ymin", "xmax", "ymax")
  assert view.mask is None and view.class_text is None  # not in this output
  # a schema name this tool does not know is matched by its image feature
  per_object = views.resolve({"schema": "coco_per_object", "features": {
      "image": {}, "bbox": {}, "category_id": {}}})
  assert per_object.box_format == views.PIXEL_XYWH and per_object.class_id == "category_id"
  with pytest.raises(ValueError, match="known schemas"):
    views.resolve({"schema": "audio", "features": {"wave": {}}})


def test_show_picks_with_the_seed_and_reads_only_what_it_needs():
  picked = show.pick([5, 0, 7], 4, seed=1)
  assert picked == show.pick([5, 0, 7], 4, seed=1)
  assert sum(len(v) for v in picked.values()) == 4 and 1 not in picked
  assert all(0 <= i < [5, 0, 7][s] for s, v in picked.items() for i in v)
  assert show.pick([2, 1], 10, seed=0) == {0: [0, 1], 1: [0]}


# ---------------------------------------------------------------------------------------------
# show and inspect on real pipeline outputs
# ---------------------------------------------------------------------------------------------

def _spaced_dataset(root: Path) -> Dataset:
  """Images with boxes that neither overlap nor touch, so every edge is visible."""
  (root / "images").mkdir(parents=True)
  images = []
  layouts = [((240, 180), [("cat", 20.0, 50.0, 100.0, 150.0), ("dog", 140.0, 40.0, 220.0, 120.0)]),
             ((180, 240), [("person", 30.0, 60.0, 150.0, 200.0)]),
             ((200, 150), [("dog", 15.0, 40.0, 70.0, 130.0), ("cat", 120.0, 50.0, 185.0, 120.0)]),
             ((160, 160), [])]
  for i, ((w, h), boxes) in enumerate(layouts):
    name = f"img_{i}.{'png' if i % 2 else 'jpg'}"
    Image.new("RGB", (w, h), GRAY).save(root / "images" / name,
                                        format="PNG" if i % 2 else "JPEG")
    images.append(sample.SampleImage(name, w, h, "png" if i % 2 else "jpeg", boxes,
                                     "train" if i < 3 else "val", 100 + i))
  for split in ("train", "val"):
    sample.write_coco(str(root), images, split)
  return Dataset(root, images)


def test_show_cli_on_a_converted_dataset(tmp_path, capsys):
  ds = _spaced_dataset(tmp_path / "data")
  out = tmp_path / "out"
  run_cli("convert", "--format=coco", *ds.inputs("coco"), f"--output={out}")
  picture = tmp_path / "grid.png"
  assert cli.main(["show", str(out), "--split", "train", "-n", "8", "--seed", "3",
                   "--output", str(picture)]) == 0
  assert f"{picture}: 3 examples" in capsys.readouterr().out
  ids = ds.coco_category_ids()
  grid = Image.open(picture).convert("RGB")
  # the saved PNG has no layout: take it from the same call in Python (same seed, same grid)
  same = reader_show(str(out), split="train", n=8, seed=3)
  assert same.tobytes() == grid.tobytes()
  tiles = _tiles(same)
  assert sorted(tiles) == [im.file_name for im in ds.images if im.split == "train"]
  for im in ds.images[:3]:
    for label, *box in im.boxes:
      assert_box_drawn(grid, tiles[im.file_name], box, show.box_color(label, ids), im.file_name)
  # a split the output lacks, and n < 1: one line, exit 2
  assert cli.main(["show", str(out), "--split", "test", "--output", str(picture)]) == 2
  assert "split 'test' not in" in capsys.readouterr().err
  for command in (["show", str(tmp_path / "nothing"), "--output", str(picture)],
                  ["inspect", str(tmp_path / "nothing")]):
    assert cli.main(command) == 2
    assert "has no readable manifest.json" in capsys.readouterr().err


def test_show_without_shard_counts_samples_in_one_pass(shared, dataset):
  """--sink beam leaves per-shard counts unknown: show falls back to reservoir sampling."""
  out = shared.build("beam_sink", lambda o: run_cli(
      "convert", "--format=coco", *dataset.inputs("coco"), f"--output={o}", "--sink=beam",
      "--num-shards=2", "--runner=FnApiRunner"))
  grid = reader_show(str(out), split="val", n=5, seed=2)
  names = [t["name"] for t in grid.info["tiles"]]
  assert len(names) == len(set(names)) == 5
  assert set(names) <= {im.file_name for im in dataset.images if im.split == "val"}
  assert names == [t["name"] for t in reader_show(str(out), split="val", n=5, seed=2)
                   .info["tiles"]]


@pytest.fixture(scope="session")
def coco_output(shared, dataset) -> Path:
  """The shared default COCO run (same build as test_end_to_end's format_output)."""
  return shared.build("coco", lambda out: run_cli(
      "convert", "--format=coco", *dataset.inputs("coco"), f"--output={out}",
      "--runner=DirectRunner"))


def _band(area: float) -> str:
  return "small" if area < 32 ** 2 else "medium" if area < 96 ** 2 else "large"


def test_inspect_json_counts_equal_the_source(coco_output, dataset, capsys):
  assert cli.main(["inspect", str(coco_output), "--json"]) == 0
  doc = json.loads(capsys.readouterr().out)
  assert doc["status"] == "ok" and doc["records_match_manifest"]
  ids = dataset.coco_category_ids()
  want_classes = []
  for split in dataset.splits:
    images = [im for im in dataset.images if im.split == split]
    per_image = [len(im.boxes) for im in images]
    got = doc["splits"][split]
    assert got["images"] == got["records"] == len(images)
    assert got["objects"] == sum(per_image)
    assert got["objects_per_image"] == {"min": min(per_image), "max": max(per_image),
                                        "median": statistics.median(per_image)}
    bands = collections.Counter(_band((x1 - x0) * (y1 - y0))
                                for im in images for _, x0, y0, x1, y1 in im.boxes)
    assert got["box_sizes"] == {b: bands.get(b, 0) for b in ("small", "medium", "large")}
    objects = collections.Counter(b[0] for im in images for b in im.boxes)
    holders = collections.Counter(c for im in images for c in {b[0] for b in im.boxes})
    want_classes += [{"split": split, "class": c, "id": ids[c], "images": holders[c],
                      "objects": objects[c]} for c in sorted(objects)]
  assert doc["classes"] == want_classes
  sizes = collections.Counter((im.width, im.height) for im in dataset.images)
  assert {(s["width"], s["height"]): s["images"] for s in doc["image_sizes"]["most_common"]} \
      == dict(sizes)
  assert doc["image_sizes"]["width"]["max"] == max(im.width for im in dataset.images)
  assert doc["errors"] == {"count": 0, "by_reason": {}}


def test_inspect_text_starts_with_the_status_and_keeps_the_summary(coco_output, capsys):
  assert cli.main(["inspect", str(coco_output)]) == 0
  text = capsys.readouterr().out
  assert text.splitlines()[0] == "status: ok"
  assert "beam-tfrecord" in text.splitlines()[1] and "per class:" in text
  assert re.search(r"^\s+person\s+1\s+\d+", text, flags=re.M), text


@pytest.mark.parametrize("schema", ["classification", "tutorial", "coco-objects"])
def test_inspect_counts_other_schemas(tmp_path, schema):
  out = SCHEMAS[schema](tmp_path / schema)
  manifest = json.loads((out / "manifest.json").read_text())
  doc = stats.compute(manifest, *stats.frames(str(out), manifest))
  if schema == "coco-objects":  # two records, one image with two boxes
    train = doc["splits"]["train"]
    assert (train["records"], train["images"], train["objects"]) == (2, 1, 2)
    assert train["objects_per_image"] == {"min": 2, "median": 2, "max": 2}
    assert train["box_sizes"] == {"small": 0, "medium": 2, "large": 0}
    assert doc["image_sizes"]["most_common"] == [{"width": 220, "height": 160, "images": 1}]
    assert [(c["class"], c["images"], c["objects"]) for c in doc["classes"]] == \
        [("cat", 1, 1), ("dog", 1, 1)]
    return
  want = collections.Counter((("train" if i < 2 else "val") if schema == "classification"
                              else "train", label)
                             for i, (_, _, _, label) in enumerate(CLASSIFIED)
                             if schema == "classification" or i < 2)
  assert {(c["split"], c["class"]): c["images"] for c in doc["classes"]} == dict(want)
  assert all(c["objects"] == 0 and c["id"] == LABELS[c["class"]] for c in doc["classes"])


def test_inspect_plot_draws_or_explains_what_is_missing(coco_output, tmp_path, capsys,
                                                        monkeypatch):
  target = tmp_path / "stats.png"  # matplotlib: in the dev extra, so CI draws it
  assert cli.main(["inspect", str(coco_output), "--plot", str(target)]) == 0
  with Image.open(target) as im:
    assert im.size[0] > 500 and im.size[1] > 300
  monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra were not installed
  assert cli.main(["inspect", str(coco_output), "--plot", str(tmp_path / "x.png")]) == 2
  assert "pip install 'beam-tfrecord[plots]'" in capsys.readouterr().err
  assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------------------------------------
# The dataset card
# ---------------------------------------------------------------------------------------------

def _card_table(text: str, heading: str) -> List[List[str]]:
  section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
  rows = [line for line in section.splitlines() if line.startswith("|")][2:]
  return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _python_blocks(text: str) -> List[str]:
  return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_card_numbers_equal_the_manifest(coco_output):
  text = (coco_output / "README.md").read_text(encoding="utf-8")
  m = json.loads((coco_output / "manifest.json").read_text(encoding="utf-8"))
  assert text == card.render(m)
  assert m["created"] in text and "Status: **ok**" in text
  assert "`beam-tfrecord convert --format=coco" in text  # the command, as given
  splits = {row[0]: row[1:] for row in _card_table(text, "Splits")}
  for split, entry in m["splits"].items():
    assert splits[split] == [str(entry["examples"]), str(entry["objects"]),
                             str(entry["num_shards"]), f"{entry['bytes'] / 1e6:.2f}"]
  assert splits["**total**"][:2] == [str(m["totals"]["examples"]), str(m["totals"]["objects"])]
  classes = {row[1]: row for row in _card_table(text, "Classes")}
  assert sorted(classes) == sorted(m["label_map"])
  for name, row in classes.items():
    counts = [m["splits"][s]["classes"].get(name, 0) for s in m["splits"]]
    assert row == [str(m["label_map"][name]), name, *map(str, counts), str(sum(counts))]
  keys = {row[0].strip("`"): row[1:] for row in _card_table(text, "Features")}
  assert set(keys) == set(m["features"])
  assert keys["image/object/bbox/xmin"] == ["float32", "list"]
  assert keys["image/encoded"] == ["bytes", "one per example"]
  assert "No input was rejected." in text


def test_card_lists_errors_by_reason():
  manifest = {"splits": {}, "config": {"output": "/x"}, "features": {},
              "errors": {"count": 3, "rate": 0.25, "by_reason": {"missing_image": 2,
                                                                 "unknown_class": 1},
                         "by_level": {"image": 2, "object": 1}, "files": ["errors-0.jsonl"]}}
  text = card.render(manifest)
  assert _card_table(text, "Errors") == [["missing_image", "2"], ["unknown_class", "1"]]
  assert "3 inputs were rejected" in text and "`errors-0.jsonl`" in text


def test_card_snippets_run_as_written(coco_output, tmp_path):
  """Each output's card: its tf.data snippet, executed in a fresh Python, parses every record
  of the output, for the pipeline's od_api output and the other schemas' shapes."""
  outputs = [coco_output] + [SCHEMAS[s](tmp_path / s) for s in
                              ("coco-objects", "classification", "renamed")]
  script, expected = [], []
  for out in outputs:
    m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    text = (out / "README.md").read_text(encoding="utf-8") if (out / "README.md").exists() \
        else card.render(m)
    snippet = _python_blocks(text)[0]
    assert "feature_description = {" in snippet
    script.append(f"exec({snippet!r}, {{}})")
    expected.append(f"{m['splits'][card.default_split(m)]['examples']} examples")
  result = run_python(["-c", "\n".join(script)])
  assert result.returncode == 0, result.stderr[-3000:]
  counts = [line for line in result.stdout.splitlines() if line.endswith(" examples")]
  assert counts == expected, result.stdout


def test_card_reader_snippet_runs(coco_output):
  text = (coco_output / "README.md").read_text(encoding="utf-8")
  snippet = _python_blocks(text)[1]
  result = run_python(["-c", snippet])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "'image/object/bbox/xmin'" in result.stdout


def test_the_card_is_one_of_the_runs_own_files(tmp_path, capsys):
  """--overwrite replaces our card (the manifest lists it); a README.md of the user's own in
  the output directory is foreign: the run refuses and leaves it as it was."""
  ds = _spaced_dataset(tmp_path / "data")
  out = tmp_path / "out"
  run_cli("convert", "--format=coco", *ds.inputs("coco"), f"--output={out}")
  manifest = json.loads((out / "manifest.json").read_text())
  assert "README.md" in manifest["files"]
  first = (out / "README.md").read_text(encoding="utf-8")
  run_cli("convert", "--format=coco", *ds.inputs("coco"), f"--output={out}", "--overwrite")
  again = json.loads((out / "manifest.json").read_text())
  assert again["run_id"] != manifest["run_id"]
  card = (out / "README.md").read_text(encoding="utf-8")
  assert card != first and again["created"] in card and "--overwrite" in card
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "README.md").write_text("my notes")
  capsys.readouterr()
  assert cli.main(["convert", "--format=coco", *ds.inputs("coco"), f"--output={mine}",
                   "--overwrite"]) == 2
  assert "README.md" in capsys.readouterr().err
  assert [p.name for p in mine.iterdir()] == ["README.md"]
  assert (mine / "README.md").read_text() == "my notes"


# ---------------------------------------------------------------------------------------------
# Progress in images
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("beam_args", [["--runner=FnApiRunner"],
                                       ["--runner=DirectRunner", "--direct_num_workers=2",
                                        "--direct_running_mode=multi_processing"]])
def test_progress_reaches_the_total(tmp_path, beam_args):
  """The plan and shard-writing steps of a real run, stopped before finalize deletes the
  staging directory: the progress files add up to every image, in-process and across
  processes."""
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions

  from beam_tfrecord import pipeline
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.records import packed
  from beam_tfrecord.write.transform import WriteShards
  ds = make_dataset(tmp_path / "data", count=9, seed=5, extras=False)
  config = config_mod.ConvertConfig(format="coco", inputs=ds.file_inputs("coco"),
                                  images=[str(ds.image_dir)], output=str(tmp_path / "out"),
                                  num_shards=2)
  staging = outputs.run_dir(config.output, "test")
  with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
    source, _ = registry.read(p, config, first_id=1, in_process=pipeline.in_process(p))
    images, _ = source.images | locate.PrepareImages(None)
    images = images | beam.Map(packed.pack)
    label_map = beam.pvalue.AsSingleton(p | label_stage.BuildLabelMap(source, None))
    plans = beam.pvalue.AsSingleton(images | plan_stage.PlanShards(2, None, staging))
    _ = images | WriteShards(staging, label_map, plans, config.encode_options())
  done, total, planned_at = progress.snapshot(staging)
  assert (done, total) == (len(ds.images), len(ds.images))
  assert planned_at is not None
  line = progress.describe(done, total, 3.0, 2.0)
  assert f"{len(ds.images)} / {len(ds.images)} images (100%)" in line and "ETA" not in line
  watcher = progress.Progress(staging)
  assert "9 / 9 images" in watcher._text() and watcher.last == (9, 9)
  import shutil
  shutil.rmtree(staging)  # what a successful commit does: the line must not fall back to "planning"
  assert "9 images done, finishing" in watcher._text()


def test_progress_line_before_and_during_the_run():
  assert "planning" in progress.describe(0, None, 4.0, 0.0)
  line = progress.describe(250, 1000, 12.0, 10.0)
  assert line == "converting: 250 / 1,000 images (25%), 25 images/s, ETA 30 s, 12 s"
  assert "ETA 1 h 06 min" in progress.describe(10, 4000, 5.0, 10.0)


def test_shard_counter_writes_at_most_every_interval(tmp_path):
  counter = progress.ShardCounter(str(tmp_path), "train-00000-of-00001.tfrecord", every=3600)
  for _ in range(5):
    counter.tick()
  assert progress.snapshot(str(tmp_path)) == (0, None, None)  # nothing written yet
  counter.close()
  progress.record_planned(str(tmp_path), "train", 7)
  assert progress.snapshot(str(tmp_path))[:2] == (5, 7)
  assert sorted(p.name for p in tmp_path.iterdir()) == [".done-train-00000-of-00001.tfrecord",
                                                        ".planned-train"]

"""readback/show.py: `beam-tfrecord show`, a grid of examples drawn from the records.

Pictures are checked pixel by pixel: a box edge must have its class colour where the box's
coordinates put it. Every schema a manifest may declare (od_api, classification, tutorial,
coco-objects, renamed features) is covered by outputs written by hand with TensorFlow's own
tf.train.Example and TFRecordWriter (tests/handmade_outputs.py), next to real pipeline outputs.
"""
from __future__ import annotations

import json
from typing import Dict, Tuple

import pytest
from conftest import run_cli
from handmade_outputs import (CLASSIFIED, GRAY, LABELS, OD_BOXES, SCHEMAS,
                              _spaced_dataset, classification_output)
from PIL import Image

from beam_tfrecord import cli
from beam_tfrecord.readback import show
from beam_tfrecord.readback.reader import show as reader_show


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


def test_show_picks_with_the_seed_and_reads_only_what_it_needs():
  picked = show.pick([5, 0, 7], 4, seed=1)
  assert picked == show.pick([5, 0, 7], 4, seed=1)
  assert sum(len(v) for v in picked.values()) == 4 and 1 not in picked
  assert all(0 <= i < [5, 0, 7][s] for s, v in picked.items() for i in v)
  assert show.pick([2, 1], 10, seed=0) == {0: [0, 1], 1: [0]}


# ---------------------------------------------------------------------------------------------
# show on real pipeline outputs
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spaced(tmp_path_factory):
  """_spaced_dataset converted once for the module: (dataset, output). No test changes the
  output; one that must, copies it."""
  root = tmp_path_factory.mktemp("spaced")
  ds = _spaced_dataset(root / "data")
  run_cli("convert", "--format=coco", *ds.inputs("coco"), f"--output={root / 'out'}")
  return ds, root / "out"


@pytest.mark.e2e
def test_show_cli_on_a_converted_dataset(spaced, tmp_path, capsys):
  ds, out = spaced
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


@pytest.mark.e2e
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


@pytest.mark.e2e
# one point: every kill point's state is tests/e2e/test_output_safety.py's; here what the
# read-only commands say of it
@pytest.mark.parametrize("point", ["swap-old-manifest"])
def test_show_inspect_and_reader_on_an_interrupted_swap_name_verify_repair(spaced, tmp_path,
                                                                          capsys, point):
  """A run killed while replacing the output (its old manifest still there, or already
  gone): show, inspect and reader.load say so in one line (exit 2) naming
  `beam-tfrecord verify --repair`, never a traceback and never a read of a half-swapped
  output; after the repair they read it."""
  import subprocess
  import sys

  from conftest import subprocess_env

  from beam_tfrecord.finalize.output import IncompleteOutput
  from beam_tfrecord.readback import reader
  import shutil
  ds, converted = spaced
  out = tmp_path / "out"
  shutil.copytree(converted, out)  # the finished output the killed run replaces
  convert = ["convert", "--format=coco", *ds.inputs("coco"), f"--output={out}", "--overwrite"]
  proc = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", *convert],
                        env=subprocess_env(BEAM_TFRECORD_KILL_AT=point),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == -9, proc.stderr[-2000:]
  picture = tmp_path / "show.png"
  for argv in (["show", str(out), "--output", str(picture)], ["inspect", str(out)],
               ["inspect", str(out), "--json"]):
    capsys.readouterr()
    assert cli.main(argv) == 2, argv
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("beam-tfrecord: error: ")
    assert f"`beam-tfrecord verify --repair {out}`" in lines[0]
    assert captured.out == ""
  assert not picture.exists()
  with pytest.raises(IncompleteOutput, match="verify --repair"):
    reader.load(str(out), "train")
  assert cli.main(["verify", "--repair", str(out)]) == 0
  assert cli.main(["show", str(out), "--output", str(picture)]) == 0
  assert cli.main(["inspect", str(out)]) == 0

"""readback/stats.py: `beam-tfrecord inspect`: the status first, counts equal to the source's,
every schema's records counted, and --plot."""
from __future__ import annotations

import collections
import json
import re
import statistics
import sys

import pytest
from handmade_outputs import CLASSIFIED, LABELS, SCHEMAS
from PIL import Image

from beam_tfrecord import cli
from beam_tfrecord.readback import stats


def _band(area: float) -> str:
  return "small" if area < 32 ** 2 else "medium" if area < 96 ** 2 else "large"


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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

"""One dataset, written as each labelling tool writes it (tests/layouts_<format>.py) and as
COCO: every format gives the same examples (image bytes, size, boxes, class names), read back
with TensorFlow, and --classes / --class-map select the same objects in each."""
from __future__ import annotations

import collections
from typing import Dict, List, Tuple

import layouts_cvat
import layouts_labelbox
import layouts_labelme
import layouts_openimages
import layouts_yolo_keras
import pytest
from bad_data import convert

pytestmark = pytest.mark.e2e

# in pixels: CVAT writes {:.2f} pixels and Open Images 6 decimals of the image size; keras-yolo3
# writes int() pixels (voc_annotation.py), so its corners are the sample's truncated
PIXELS = {"yolo-keras": 1.0}
DEFAULT_PIXELS = 0.01


def _sources(ds, root) -> Dict[str, List[str]]:
  """--input (and options) of the same dataset in every format."""
  lm = layouts_labelme.write_labelme(ds.images, ds.image_dir, root / "labelme", polygons=True)
  cvat = layouts_cvat.write_cvat(ds.images, ds.image_dir, root / "cvat")
  lb = layouts_labelbox.write_labelbox(ds.images, ds.image_dir, root / "labelbox")
  oid = layouts_openimages.write_openimages(ds.images, ds.image_dir, root / "oid")
  keras = layouts_yolo_keras.write_yolo_keras(ds.images, ds.image_dir, root / "keras",
                                              style="roboflow")
  return {
      "coco": [f"--input={ds.coco_file(s)}" for s in ds.splits] + [f"--images={ds.image_dir}"],
      "labelme": [f"--input={lm}"],
      "cvat": [f"--input={cvat}"],
      "labelbox": [f"--input={lb}", f"--images={lb.parent / 'images'}"],
      "openimages": [f"--input={p}" for p in sorted(oid.glob("*-annotations-bbox.csv"))],
      "yolo-keras": [f"--input={keras}"],
  }


def _examples(run, fmt: str = "coco") -> Dict[str, Tuple]:
  """{image SHA-256: (width, height, [(class, xmin, ymin, xmax, ymax)])} of a run, classes
  as the sample names them."""
  result = {}
  sample_name = {_name(fmt, n): n for n in ("person", "dog", "cat")}
  for ex in run.examples:
    names = [sample_name.get(t.decode(), t.decode()) for t in ex["image/object/class/text"]]
    boxes = list(zip(names,
                     ex["image/object/bbox/xmin"], ex["image/object/bbox/ymin"],
                     ex["image/object/bbox/xmax"], ex["image/object/bbox/ymax"]))
    sha = ex["image/key/sha256"].decode()
    assert sha not in result, "an image written twice"
    result[sha] = (ex["image/width"], ex["image/height"], sorted(boxes))
  return result


def _same(got: Dict[str, Tuple], want: Dict[str, Tuple], what: str) -> None:
  assert sorted(got) == sorted(want), what
  pixels = PIXELS.get(what, DEFAULT_PIXELS)
  for sha, (w, h, boxes) in want.items():
    gw, gh, gboxes = got[sha]
    assert (gw, gh) == (w, h) and len(gboxes) == len(boxes), (what, sha)
    limits = (pixels / w, pixels / h) * 2  # xmin, ymin, xmax, ymax
    for g, e in zip(sorted(gboxes, key=lambda b: (b[0], round(b[1] * w))),
                    sorted(boxes, key=lambda b: (b[0], round(b[1] * w)))):
      assert g[0] == e[0] and all(abs(a - b) <= limit + 1e-6
                                  for a, b, limit in zip(g[1:], e[1:], limits)), (what, g, e)


def _name(fmt: str, name: str) -> str:
  """A sample class as the format calls it: Open Images' display names are capitalised."""
  return name.capitalize() if fmt == "openimages" else name


def _selection(fmt: str, select: bool) -> List[str]:
  if not select:
    return []
  cat, dog = _name(fmt, "cat"), _name(fmt, "dog")
  return ["--classes", f"{cat},{dog}", "--class-map", f"{cat}=pet,{dog}=pet"]


# --classes/--class-map are applied after the source (prepare/select.py, the same code for
# every format): with them, the formats whose class names are declared beside the boxes (COCO
# categories, CVAT labels, Open Images' capitalised descriptions, a keras-yolo3 classes file).
# LabelMe and Labelbox declare none, like VOC and CSV, whose selection runs end to end in
# tests/prepare/test_class_selection.py; without the options, every format.
SELECTED_FORMATS = ("coco", "cvat", "openimages", "yolo-keras")


@pytest.mark.parametrize("select", [False, True])
def test_every_format_gives_the_examples_coco_gives(small_dataset, tmp_path, capsys, select):
  sources = _sources(small_dataset, tmp_path / "src")
  if select:
    sources = {fmt: args for fmt, args in sources.items() if fmt in SELECTED_FORMATS}
  runs = {fmt: convert([*args, "--output", str(tmp_path / fmt), *_selection(fmt, select)],
                       capsys) for fmt, args in sources.items()}
  for fmt, run in runs.items():
    assert run.code == 0, (fmt, run.stderr)
    assert [e for e in run.errors if e["level"] != "warning"] == [], fmt
  reference = _examples(runs["coco"])
  # Open Images lists only the images that have boxes in the source
  boxed = {ex["image/key/sha256"].decode() for ex in runs["openimages"].examples}
  assert boxed == {_sha(small_dataset, im) for im in small_dataset.images if im.boxes}
  for fmt, run in runs.items():
    want = reference if fmt != "openimages" else {
        sha: v for sha, v in reference.items() if sha in boxed}
    _same(_examples(run, fmt), want, fmt)
  if select:
    names = {t for run in runs.values() for ex in run.examples
             for t in ex["image/object/class/text"]}
    assert names == {b"pet"}
    counts = {fmt: {n.lower(): c for n, c in run.manifest["excluded_classes"].items()}
              for fmt, run in runs.items()}
    assert len({tuple(sorted(c.items())) for c in counts.values()}) == 1, counts
    expected = collections.Counter(b[0] for im in small_dataset.images for b in im.boxes
                                   if b[0] not in ("cat", "dog"))
    assert counts["coco"] == dict(expected)



def _sha(ds, im) -> str:
  import hashlib
  return hashlib.sha256(ds.data(im)).hexdigest()

"""sources.base.MAX_OBJECTS_PER_IMAGE in the formats that read rows, lines, XMLs and data rows,
through the CLI: an image with one object more than the bound is one too_many_objects error
naming it, and the other images are converted as always (read back with TF). The grouping
paths of CSV and Open Images (and so their bound) are in test_csv_split.py and
test_openimages.py.

Each input is written by the format's own fixture writer (tests/layouts*.py, sample.py) from
the small sample, one image of which is given BOUND + 1 copies of its first box, another
BOUND.
"""
from __future__ import annotations

import dataclasses

import layouts
import layouts_labelbox as lb
import layouts_yolo_keras as lk
import pytest
from bad_data import RUNNER, convert

from beam_tfrecord import sample
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE as BOUND


def _grown(images):
  """(images with the first boxed one given BOUND + 1 copies of its first box and the second
  BOUND, the first as it was)."""
  big, full = [im for im in images if im.boxes][:2]
  sizes = {big.file_name: BOUND + 1, full.file_name: BOUND}
  return [dataclasses.replace(im, boxes=[im.boxes[0]] * sizes[im.file_name])
          if im.file_name in sizes else im for im in images], big


def _sorted_ids(images):
  return {name: i for i, name in enumerate(sorted({b[0] for im in images for b in im.boxes}),
                                           start=1)}


def _first_line(path, starts: str) -> int:
  return next(n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if line.startswith(starts))


@dataclasses.dataclass
class Case:
  args: list                  # convert's, but --output
  key: str                    # of the grown image's error
  source: str                 # of that error
  view: object = list         # images -> as a run gives them back
  ids: object = _sorted_ids   # images given back -> the label map
  split_of: object = None
  image_dir: object = None    # where the given-back images' files are (default the sample's)


# Each writer: (small dataset, its images with one grown, that image, tmp_path) -> Case

def _voc(ds, images, big, tmp_path):
  voc = sample.write_voc(str(tmp_path), images)
  xml = f"{voc}/Annotations/{layouts.stem(big.file_name)}.xml"
  return Case(["--format", "voc", "--input", voc, "--images", str(ds.image_dir)], xml, xml)


def _yolo(ds, images, big, tmp_path):
  yaml_path = layouts.write_ultralytics(images, ds.image_dir, tmp_path / "src")
  label = tmp_path / "src" / "shapes" / "labels" / big.split / (
      layouts.stem(big.file_name) + ".txt")
  ids = {name: i + 1 for i, name in enumerate(layouts.YOLO_NAMES)}
  return Case(["--format", "yolo", "--input", str(yaml_path)],
              f"images/{big.split}/{big.file_name}", str(label), ids=lambda _: ids)


def _yolo_keras(ds, images, big, tmp_path):
  root = lk.write_yolo_keras(images, ds.image_dir, tmp_path / "export", style="roboflow")
  path = root / layouts.ROBOFLOW_SPLIT[big.split] / "_annotations.txt"
  ids = _sorted_ids(images)  # _classes.txt names every class written
  args = ["--format", "yolo-keras"]
  for split in sorted({layouts.ROBOFLOW_SPLIT[im.split] for im in images}):
    args += ["--input", f"{split}={root / split}"]
  return Case(args, big.file_name,
              f"{path}:{_first_line(path, big.file_name + ' ')}",
              lambda ims: lk.view(ims, "roboflow"), lambda _: ids)


def _labelbox(ds, images, big, tmp_path):
  export = lb.write_labelbox(images, ds.image_dir, tmp_path / "lb")
  line = next(n for n, im in enumerate(images, 1) if im.file_name == big.file_name)
  return Case(["--format", "labelbox", "--input", str(export), "--images",
               str(tmp_path / "lb" / "images")], big.file_name, f"{export}:{line}",
              split_of=lambda im: "train")


# CSV and Open Images bound their images in their readers' grouping (the same code whole, in
# ranges and spill-joined): test_csv_split.py and test_openimages.py run each of those paths
# on an image of BOUND + 1 rows and one of BOUND and check the error (reason, level, key,
# source line) and the kept image's BOUND objects; writing and reading back an image of
# BOUND objects through the CLI is the other formats' case here.
WRITERS = [_voc, _yolo, _yolo_keras, _labelbox]


@pytest.mark.e2e
@pytest.mark.parametrize("write", WRITERS, ids=lambda w: w.__name__.strip("_"))
def test_an_image_over_the_bound_is_one_error(small_dataset, tmp_path, write):
  """An image of BOUND + 1 objects is one error; one of BOUND is written whole."""
  ds = small_dataset
  images, big = _grown(ds.images)
  case = write(ds, images, big, tmp_path)
  run = convert(case.args + ["--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0, run.stderr
  [error] = run.errors
  assert (error["reason"], error["level"], error["key"], error["source"]) == (
      "too_many_objects", "image", case.key, case.source)
  assert f"{BOUND:,}" in error["message"] and "not converted" in error["message"]
  kept = case.view([im for im in images if im.file_name != big.file_name])
  assert max(len(im.boxes) for im in kept) == BOUND
  layouts.check_od_examples(run, kept, case.image_dir or ds.image_dir, case.ids(kept),
                            case.split_of)

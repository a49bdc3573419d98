"""N small images as hard links: a COCO dataset of millions without rendering millions.

run.py's `--small-images` mode. K = max(4, ceil(N / 60000)) distinct 64x48 JPEGs are
rendered once; image i is a hard link to source i % K (ext4 allows 65,000 links per file),
so making N images costs N link() calls, not N encodes. Each image has 2 boxes of 3
categories. The JSON is written in pieces (1M images is ~290 MB: never one Python document):

  CACHE/small-v1-N/sources/src_0000.jpg ...   the K rendered images
  CACHE/small-v1-N/images/img_00000000.jpg    N hard links
  CACHE/small-v1-N/coco.json                  COCO instances JSON

The folder is built under a temporary name and renamed when complete, so a cached one is whole.
Coordinates are integers by default; `--coordinates rounded` writes them with 2 decimals and
`--coordinates full` at full precision, as labelling tools export them (repr's 17 significant
digits and '%.19g''s 19, e.g. 0.3281332813835913200); `--polygons` adds an 8-point polygon
`segmentation` to every annotation. Such datasets are cached as small-v1-N-COORDINATES[-poly]
(write_json alone makes the JSON: benchmarks/coco_parse.py).
Usage: python benchmarks/small_dataset.py --images 200000 [--coordinates full --polygons]
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import math
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dataset import DEFAULT_CACHE, Dataset  # noqa: E402

VERSION = 1  # bump when images or annotations change (it is part of the folder name)
WIDTH, HEIGHT = 64, 48
LINKS_PER_SOURCE = 60000  # under ext4's 65,000 links per inode
CATEGORIES = ((1, "person"), (2, "car"), (3, "dog"))
CHUNK = 10000  # images per JSON write


def sources_needed(count: int) -> int:
  return max(4, math.ceil(count / LINKS_PER_SOURCE))


def render(index: int) -> bytes:
  """A 64x48 JPEG (quality 90) that differs per index: noise over a colour gradient."""
  import numpy as np
  from PIL import Image

  rng = np.random.default_rng(index)
  y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
  base = rng.uniform(40, 200, 3).astype(np.float32)
  pixels = base + (x[..., None] + y[..., None]) * rng.uniform(-1, 1, 3).astype(np.float32)
  pixels += rng.normal(0, 8, pixels.shape).astype(np.float32)
  out = io.BytesIO()
  Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(out, format="JPEG", quality=90)
  return out.getvalue()


def boxes(index: int):
  """Two boxes (category_id, x, y, w, h) inside the 64x48 image, cheap and deterministic."""
  a, b = index % 17, index % 13
  return ((CATEGORIES[index % 3][0], 2 + a, 3 + b, 20, 16),
          (CATEGORIES[(index + 1) % 3][0], 30 + b, 20 + a // 2, 24, 12))


COORDINATES = ("int", "rounded", "full")
_PHI = 0.6180339887498949  # fractions spread by the golden ratio: no two alike in a row


def _number(value: float, index: int, coordinates: str) -> str:
  """A coordinate as the JSON text of the chosen kind."""
  if coordinates == "int":
    return str(int(value))
  if coordinates == "rounded":
    return f"{value:.2f}"
  return repr(value) if index % 2 else f"{value:.19g}"  # 17 or 19 significant digits


def annotation(index: int, k: int, category: int, box, coordinates: str = "int",
               polygons: bool = False) -> str:
  """The JSON text of image `index`'s k-th annotation (id 2 * index + k + 1)."""
  if coordinates == "int":
    x, y, w, h = box
  else:  # a fraction in every value; x < 1 in 1 of 17 images (19 fraction digits in 'full')
    f = (index * 2 + k) * _PHI % 1
    x, y, w, h = box[0] - 2 + f, box[1] + f / 3, box[2] - f, box[3] + f / 7
  num = lambda v, j: _number(v, index + j, coordinates)  # noqa: E731
  area = num(w * h, 4) if coordinates != "int" else str(w * h)
  text = (f'{{"id": {2 * index + k + 1}, "image_id": {index + 1}, "category_id": {category}, '
          f'"bbox": [{num(x, 0)}, {num(y, 1)}, {num(w, 2)}, {num(h, 3)}], "area": {area}, '
          f'"iscrowd": 0')
  if polygons:  # an octagon inside the box
    points = []
    for j, (u, v) in enumerate(((0.3, 0), (0.7, 0), (1, 0.3), (1, 0.7), (0.7, 1), (0.3, 1),
                                (0, 0.7), (0, 0.3))):
      points += [num(x + u * w, j), num(y + v * h, j + 1)]
    text += f', "segmentation": [[{", ".join(points)}]]'
  return text + "}"


def write_json(path: str, count: int, coordinates: str = "int", polygons: bool = False) -> None:
  """The COCO instances JSON of the first `count` images, written in pieces."""
  with open(path, "w", encoding="utf-8") as f:
    f.write('{"info": ' + json.dumps({"description": f"beam-tfrecord small-image benchmark "
                                                      f"v{VERSION}, {count} images"}))
    f.write(', "images": [')
    for start in range(0, count, CHUNK):
      f.write(("," if start else "") + ",".join(
          f'{{"id": {i + 1}, "file_name": "{file_name(i)}", "width": {WIDTH}, '
          f'"height": {HEIGHT}}}' for i in range(start, min(count, start + CHUNK))))
    f.write('], "annotations": [')
    for start in range(0, count, CHUNK):
      f.write(("," if start else "") + ",".join(
          annotation(i, k, c, (x, y, w, h), coordinates, polygons)
          for i in range(start, min(count, start + CHUNK))
          for k, (c, x, y, w, h) in enumerate(boxes(i))))
    f.write('], "categories": ' + json.dumps(
        [{"id": i, "name": n, "supercategory": "thing"} for i, n in CATEGORIES]) + "}")


def file_name(index: int) -> str:
  return f"img_{index:08d}.jpg"


def make_images(root: str, count: int) -> None:
  """root/sources/: the K rendered images; root/images/: `count` hard links to them, image i
  to source i % K."""
  sources, images = os.path.join(root, "sources"), os.path.join(root, "images")
  os.makedirs(sources)
  os.makedirs(images)
  k = sources_needed(count)
  paths = []
  for s in range(k):
    paths.append(os.path.join(sources, f"src_{s:04d}.jpg"))
    with open(paths[-1], "wb") as f:
      f.write(render(s))
  for i in range(count):
    os.link(paths[i % k], os.path.join(images, file_name(i)))


def ensure_small_dataset(count: int, cache_dir: str = DEFAULT_CACHE, verbose: bool = True,
                         coordinates: str = "int", polygons: bool = False) -> Dataset:
  """Make (once) and return the N-image hard-link dataset in cache_dir."""
  kind = "" if (coordinates, polygons) == ("int", False) else \
      f"-{coordinates}" + ("-poly" if polygons else "")
  root = os.path.join(cache_dir, f"small-v{VERSION}-{count}{kind}")
  k = sources_needed(count)
  if not os.path.isdir(root):
    start = time.monotonic()
    for stale in glob.glob(f"{root}.tmp*"):  # an interrupted earlier build
      shutil.rmtree(stale, ignore_errors=True)
    tmp = f"{root}.tmp{os.getpid()}"
    make_images(tmp, count)
    write_json(os.path.join(tmp, "coco.json"), count, coordinates, polygons)
    os.replace(tmp, root)
    if verbose:
      print(f"small dataset: {count} links to {k} sources in {time.monotonic() - start:.1f} s",
            flush=True)
  sizes = [os.path.getsize(os.path.join(root, "sources", f"src_{s:04d}.jpg")) for s in range(k)]
  total = sum(sizes[s] * len(range(s, count, k)) for s in range(k))
  # root is the cache: run.py keeps the official converter's venv there
  return Dataset(root=cache_dir, annotations=os.path.join(root, "coco.json"),
                 images_dir=os.path.join(root, "images"), count=count, total_bytes=total,
                 boxes=2 * count)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=200000, help="N (default 200000)")
  parser.add_argument("--cache-dir", default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
  parser.add_argument("--coordinates", choices=COORDINATES, default="int",
                      help="int (default), rounded (2 decimals) or full (17-19 digits)")
  parser.add_argument("--polygons", action="store_true", help="a polygon per annotation")
  args = parser.parse_args()
  data = ensure_small_dataset(args.images, args.cache_dir, coordinates=args.coordinates,
                              polygons=args.polygons)
  print(f"{data.count} images, {data.boxes} boxes, {data.total_bytes / 1e6:.1f} MB in "
        f"{data.images_dir}\nannotations: {data.annotations}")


if __name__ == "__main__":
  main()

"""Synthetic COCO-style benchmark dataset, generated once and cached.

Images are ~640x480 JPEGs at quality 90 of ~90 KB each: smooth colour waves, filled shapes
(the annotated boxes among them) and sensor-like noise, so that JPEG sizes and entropy look
like photos rather than flat test patterns. Image i depends only on i, so every dataset of N
images is the first N files of one growing pool:

  CACHE/images/img_000000.jpg ...    the pool (generated in parallel, as many as ever asked)
  CACHE/coco-N.json                  COCO instances JSON for the first N images

Usage: python benchmarks/dataset.py --images 2000   (run.py calls ensure_dataset itself)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import random
import time
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHE = os.path.join(HERE, ".cache")
VERSION = 1  # bump when the images or annotations change: the cache is then rebuilt

# A few real COCO categories, with COCO's own (gapped) ids.
CATEGORIES = {1: "person", 3: "car", 17: "cat", 18: "dog", 44: "bottle", 62: "chair",
              64: "potted plant", 72: "tv"}
SIZES = ((640, 480), (640, 480), (640, 480), (640, 427), (480, 640))  # (width, height)

Box = Tuple[int, float, float, float, float]  # (category_id, x, y, w, h), COCO convention


@dataclasses.dataclass
class Dataset:
  """A generated dataset: where it is and what it holds."""
  root: str
  annotations: str     # COCO instances JSON
  images_dir: str      # image root the JSON's file names are relative to
  count: int
  total_bytes: int     # sum of the image file sizes
  boxes: int


def file_name(index: int) -> str:
  return f"img_{index:06d}.jpg"


def layout(index: int) -> Tuple[int, int, List[Box]]:
  """(width, height, boxes) of image `index`: deterministic, 0-8 boxes, ~1 in 9 with none."""
  rng = random.Random(f"layout-{index}")
  width, height = rng.choice(SIZES)
  boxes: List[Box] = []
  for _ in range(rng.randint(0, 8)):
    w = round(rng.uniform(16, width * 0.5), 2)
    h = round(rng.uniform(16, height * 0.5), 2)
    x = round(rng.uniform(0, width - w), 2)
    y = round(rng.uniform(0, height - h), 2)
    boxes.append((rng.choice(sorted(CATEGORIES)), x, y, w, h))
  return width, height, boxes


def render(index: int) -> bytes:
  """JPEG bytes of image `index` (quality 90, ~90 KB)."""
  import io

  import numpy as np
  from PIL import Image, ImageDraw

  width, height, boxes = layout(index)
  rng = np.random.default_rng(index)
  y, x = np.mgrid[0:height, 0:width].astype(np.float32)
  pixels = np.empty((height, width, 3), np.float32)
  for c in range(3):
    a, b, phase = rng.uniform(-0.3, 0.3, 3)
    pixels[..., c] = 128 + 60 * np.sin((x * a + y * b) / 20 + phase * 10)
  image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
  draw = ImageDraw.Draw(image)
  shapes = [(x0, y0, x0 + w, y0 + h) for _, x0, y0, w, h in boxes]
  for _ in range(int(rng.integers(2, 8))):  # unannotated clutter
    x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
    shapes.append((x0, y0, x0 + int(rng.integers(20, 200)), y0 + int(rng.integers(20, 160))))
  for shape in shapes:
    colour = tuple(int(v) for v in rng.integers(0, 256, 3))
    (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(shape, fill=colour)
  noisy = np.asarray(image, np.float32) + rng.normal(0, rng.uniform(6.5, 10.5),
                                                     (height, width, 3)).astype(np.float32)
  out = io.BytesIO()
  Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(out, format="JPEG", quality=90)
  return out.getvalue()


def _write_image(task: Tuple[str, int]) -> None:
  images_dir, index = task
  path = os.path.join(images_dir, file_name(index))
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(render(index))
  os.replace(tmp, path)  # never leave a half-written image in the pool


def coco_document(count: int) -> Dict:
  """COCO instances JSON for images 0..count-1."""
  images, annotations = [], []
  for index in range(count):
    width, height, boxes = layout(index)
    images.append({"id": index + 1, "file_name": file_name(index), "width": width,
                   "height": height})
    for category_id, x, y, w, h in boxes:
      annotations.append({"id": len(annotations) + 1, "image_id": index + 1,
                          "category_id": category_id, "bbox": [x, y, w, h],
                          "area": round(w * h, 2), "iscrowd": 0})
  return {"info": {"description": f"beam-tfrecord benchmark v{VERSION}, {count} images"},
          "images": images, "annotations": annotations,
          "categories": [{"id": i, "name": n, "supercategory": "thing"}
                         for i, n in sorted(CATEGORIES.items())]}


def ensure_dataset(count: int, cache_dir: str = DEFAULT_CACHE, workers: int = 0,
                   verbose: bool = True) -> Dataset:
  """Make sure images 0..count-1 and coco-COUNT.json exist in the cache; return the dataset."""
  images_dir = os.path.join(cache_dir, "images")
  os.makedirs(images_dir, exist_ok=True)
  stamp = os.path.join(cache_dir, "VERSION")
  if not os.path.exists(stamp) or open(stamp).read().strip() != str(VERSION):
    for name in os.listdir(cache_dir):  # stale generator: drop the whole pool
      if name != "images":
        path = os.path.join(cache_dir, name)
        if os.path.isfile(path):
          os.remove(path)
    for name in os.listdir(images_dir):
      os.remove(os.path.join(images_dir, name))
    with open(stamp, "w") as f:
      f.write(f"{VERSION}\n")
  missing = [i for i in range(count) if not os.path.exists(os.path.join(images_dir, file_name(i)))]
  if missing:
    start = time.monotonic()
    if verbose:
      print(f"dataset: generating {len(missing)} images in {images_dir} ...", flush=True)
    with multiprocessing.Pool(workers or os.cpu_count() or 1) as pool:
      for _ in pool.imap_unordered(_write_image, [(images_dir, i) for i in missing], 16):
        pass
    if verbose:
      print(f"dataset: generated in {time.monotonic() - start:.0f} s", flush=True)
  annotations = os.path.join(cache_dir, f"coco-{count}.json")
  doc = coco_document(count)
  if not os.path.exists(annotations):
    tmp = f"{annotations}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
      json.dump(doc, f)
    os.replace(tmp, annotations)
  total = sum(os.path.getsize(os.path.join(images_dir, file_name(i))) for i in range(count))
  return Dataset(root=cache_dir, annotations=annotations, images_dir=images_dir, count=count,
                 total_bytes=total, boxes=len(doc["annotations"]))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=2000, help="number of images (default 2000)")
  parser.add_argument("--cache-dir", default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
  args = parser.parse_args()
  data = ensure_dataset(args.images, args.cache_dir)
  print(f"{data.count} images, {data.boxes} boxes, {data.total_bytes / 1e6:.1f} MB "
        f"(mean {data.total_bytes / data.count / 1e3:.1f} KB) in {data.images_dir}\n"
        f"annotations: {data.annotations}")


if __name__ == "__main__":
  main()

"""Resizing at conversion time: beam-tfrecord's images.prepare (Pillow draft mode for JPEGs)
against a plain Pillow open/resize/save loop, on photo-sized JPEGs.

Both sides do the same job per file: read the bytes, scale so that the longest side is
--max-side (Lanczos, aspect kept), encode a JPEG at --quality, keep the bytes in memory. Both
run in a pool of --workers processes (2 = this machine's cores), timed by wall clock over all
files, median of --repeats. A third row, images.prepare with draft mode switched off, shows how
much of the difference is the draft.

The images: benchmarks/dataset.py's photo-like 640x480 renders, scaled up to --width x
--height with fresh sensor noise (a phone photo is ~4000x3000; 1920x1440 keeps the cache small),
JPEG quality 90, cached under benchmarks/.cache/resize-W-H/.

Usage: python benchmarks/resize.py --images 200 --max-side 640 --repeats 3
"""
from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import statistics
import sys
import time
from typing import List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import dataset as datasets  # noqa: E402


def _make_photo(task: Tuple[str, int, int, int]) -> None:
  import numpy as np
  from PIL import Image
  path, index, width, height = task
  with Image.open(io.BytesIO(datasets.render(index))) as small:
    big = small.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
  noise = np.random.default_rng(index).normal(0, 6, (height, width, 3))
  pixels = np.clip(np.asarray(big, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
  Image.fromarray(pixels).save(path, format="JPEG", quality=90)


def ensure_photos(count: int, width: int, height: int, workers: int) -> List[str]:
  root = os.path.join(datasets.DEFAULT_CACHE, f"resize-{width}-{height}")
  os.makedirs(root, exist_ok=True)
  paths = [os.path.join(root, f"photo_{i:05d}.jpg") for i in range(count)]
  todo = [(p, i, width, height) for i, p in enumerate(paths) if not os.path.exists(p)]
  if todo:
    with multiprocessing.Pool(workers) as pool:
      pool.map(_make_photo, todo, chunksize=4)
  return paths


_SETTINGS = {}


def _init(max_side: int, quality: int, draft: bool) -> None:
  _SETTINGS.update(max_side=max_side, quality=quality)
  if not draft:
    from PIL import JpegImagePlugin
    JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None


def plain_pillow(path: str) -> Tuple[int, int, int]:
  """The loop users write: open, resize (longest side = max_side), save as JPEG."""
  from PIL import Image
  with Image.open(path) as image:
    scale = _SETTINGS["max_side"] / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    small = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
  out = io.BytesIO()
  small.save(out, format="JPEG", quality=_SETTINGS["quality"])
  return small.width, small.height, len(out.getvalue())


def ours(path: str) -> Tuple[int, int, int]:
  from beam_tfrecord.write import images
  with open(path, "rb") as f:
    data = f.read()
  prepared = images.prepare(data, pre=images.Preprocess(
      max_side=_SETTINGS["max_side"], jpeg_quality=_SETTINGS["quality"]))
  return prepared.info.width, prepared.info.height, len(prepared.encoded)


def time_row(fn, paths: Sequence[str], workers: int, max_side: int, quality: int, draft: bool,
             repeats: int) -> Tuple[float, list]:
  seconds = []
  with multiprocessing.Pool(workers, initializer=_init,
                            initargs=(max_side, quality, draft)) as pool:
    pool.map(fn, paths[: workers * 2])  # warm up imports in every worker
    for _ in range(repeats):
      start = time.perf_counter()
      results = pool.map(fn, paths, chunksize=4)
      seconds.append(time.perf_counter() - start)
  return statistics.median(seconds), results


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--images", type=int, default=200)
  parser.add_argument("--width", type=int, default=1920)
  parser.add_argument("--height", type=int, default=1440)
  parser.add_argument("--max-side", type=int, default=640)
  parser.add_argument("--quality", type=int, default=90)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(argv)
  paths = ensure_photos(args.images, args.width, args.height, args.workers)
  mb = sum(os.path.getsize(p) for p in paths) / 1e6
  print(f"{len(paths)} JPEGs {args.width}x{args.height} ({mb:.0f} MB) -> longest side "
        f"{args.max_side}, JPEG quality {args.quality}, {args.workers} processes, median of "
        f"{args.repeats}")
  rows = [("plain Pillow open/resize/save", plain_pillow, True),
          ("images.prepare, draft off", ours, False),
          ("images.prepare (draft mode)", ours, True)]
  base = None
  for name, fn, draft in rows:
    seconds, results = time_row(fn, paths, args.workers, args.max_side, args.quality, draft,
                                args.repeats)
    sizes = {(w, h) for w, h, _ in results}
    base = base or seconds
    print(f"  {name:<32}{seconds:>8.2f} s {len(paths) / seconds:>8.1f} img/s "
          f"{base / seconds:>6.2f}x  output sizes {sorted(sizes)[:2]}"
          f"{'...' if len(sizes) > 2 else ''}, {sum(b for *_, b in results) / 1e6:.1f} MB")
  return 0


if __name__ == "__main__":
  sys.exit(main())

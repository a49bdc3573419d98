"""The shard writer's per-image path alone: one writer, one shard, in this process (issue 37,
item 3). What `stages.py` calls run read-back, image read, encode, frame and write and
copies by content, without Beam, the front half or the profiler's overhead.

  python benchmarks/writer.py --small-images 200000 --images 20000 --repeats 5
  python benchmarks/writer.py --small-images 200000 --images 20000 --profile 25
  python benchmarks/writer.py --smoke    # 300 images, once; the shard equals a real run's

The annotations are those of the small-image set's COCO JSON (run.py --small-images makes
it), built as COCO's source builds them, packed into one sorted run as the sort step writes
it. Each repeat writes the whole shard (write_shard) into a fresh folder and takes
process CPU time (time.process_time) and wall time; the median is reported in us per image,
with the output's SHA-256 so that two versions of the code can be compared for bytes.
`--smoke` (CI) makes a 300-image set in a temporary folder and checks that the shard written
here is byte for byte the one shard of `beam-tfrecord convert --num-shards 1` of the same
set: what is timed is the writer a conversion runs.
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from beam_tfrecord.plan import runs  # noqa: E402
from beam_tfrecord.records import packed  # noqa: E402
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation  # noqa: E402
from beam_tfrecord.write import shard_writer  # noqa: E402
from beam_tfrecord.write.encode import EncodeOptions  # noqa: E402


def annotations(root: str, count: int):
  """The first `count` images of the set, as ImageAnnotations (located: size and split)."""
  with open(os.path.join(root, "coco.json")) as f:
    doc = json.load(f)
  names = {c["id"]: c["name"] for c in doc["categories"]}
  images = doc["images"][:count]
  wanted = {im["id"] for im in images}
  objects = {}
  for a in doc["annotations"]:
    if a["image_id"] in wanted:
      x, y, w, h = a["bbox"]
      objects.setdefault(a["image_id"], []).append(ObjectAnnotation(
          label=names[a["category_id"]], box=Box(x, y, x + w, y + h),
          is_crowd=bool(a.get("iscrowd")), area=a.get("area"), id=a["id"]))
  image_root = os.path.join(root, "images")
  out = []
  for im in images:
    uri = os.path.join(image_root, im["file_name"])
    out.append(ImageAnnotation(
        key=im["file_name"], uri=uri, source_id=str(im["id"]),
        source=os.path.join(root, "coco.json"), objects=tuple(objects.get(im["id"], ())),
        split="train", width=im["width"], height=im["height"],
        size_bytes=os.path.getsize(uri)))
  return sorted(out, key=lambda a: (packed.identity_hash(a.key), a.uri)), names


def task_for(run_dir: str, staging: str, anns, names) -> shard_writer.ShardTask:
  label_map = {name: i for i, name in names.items()}  # COCO's own ids, as a conversion's
  return shard_writer.ShardTask(
      staging=staging, split="train", shard=0, num_shards=1, runs=[(run_dir, 0)], lo=0,
      hi=len(anns), by_records=False, label_map=label_map, options=EncodeOptions(),
      read_ahead=1)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--small-images", type=int, default=200000, metavar="N",
                      help="the cached small-image set to read (benchmarks/.cache/small-v1-N)")
  parser.add_argument("--images", type=int, default=20000, help="images in the shard")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--profile", type=int, default=0, metavar="K",
                      help="one more pass under cProfile; print its K costliest functions")
  parser.add_argument("--cache-dir", default=os.path.join(HERE, ".cache"))
  parser.add_argument("--smoke", action="store_true",
                      help="300 images in a temporary folder, once, checked against a "
                      "conversion's shard (CI); times nothing")
  args = parser.parse_args(argv)
  if args.smoke:
    return smoke()
  root = os.path.join(args.cache_dir, f"small-v1-{args.small_images}")
  if not os.path.isdir(root):
    print(f"no {root}: make it with benchmarks/small_dataset.py --images {args.small_images}",
          file=sys.stderr)
    return 2
  anns, names = annotations(root, args.images)
  work = tempfile.mkdtemp(prefix="writer-bench-")
  try:
    run = runs.write_run(os.path.join(work, "runs"), "train",
                         0, [packed.pack(a) for a in anns])
    cpu, wall, digests = [], [], set()
    for i in range(args.repeats + bool(args.profile)):
      staging = os.path.join(work, f"out-{i}")
      os.makedirs(staging)
      task = task_for(run, staging, anns, names)
      profiler = cProfile.Profile() if i == args.repeats else None
      t0, c0 = time.perf_counter(), time.process_time()
      if profiler:
        profiler.enable()
      result = shard_writer.write_shard(task)
      if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
        continue
      cpu.append(time.process_time() - c0)
      wall.append(time.perf_counter() - t0)
      with open(os.path.join(staging, result.stats["path"]), "rb") as f:
        digests.add(hashlib.sha256(f.read()).hexdigest())
      assert result.stats["images"] == len(anns), result.stats
    n = len(anns)
    if cpu:
      print(f"{n} images, {args.repeats} repeats: CPU {statistics.median(cpu) / n * 1e6:.1f} "
            f"us/image (runs {', '.join(f'{c / n * 1e6:.1f}' for c in cpu)}), wall "
            f"{statistics.median(wall) / n * 1e6:.1f} us/image, load "
            f"{os.getloadavg()[0]:.2f}; shard sha256 {', '.join(sorted(digests))}")
  finally:
    shutil.rmtree(work, ignore_errors=True)
  return 0


def smoke(count: int = 300) -> int:
  from small_dataset import ensure_small_dataset
  work = tempfile.mkdtemp(prefix="writer-smoke-")
  try:
    data = ensure_small_dataset(count, work, verbose=False)
    root = os.path.dirname(data.annotations)
    anns, names = annotations(root, count)
    run = runs.write_run(os.path.join(work, "runs"), "train", 0, [packed.pack(a) for a in anns])
    staging = os.path.join(work, "here")
    os.makedirs(staging)
    result = shard_writer.write_shard(task_for(run, staging, anns, names))
    with open(os.path.join(staging, result.stats["path"]), "rb") as f:
      here = f.read()
    out = os.path.join(work, "converted")
    subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
                    "--input", data.annotations, "--images", data.images_dir, "--output", out,
                    "--num-shards", "1"], check=True, stdout=subprocess.DEVNULL,
                   cwd=os.path.dirname(HERE))
    with open(os.path.join(out, "train-00000-of-00001.tfrecord"), "rb") as f:
      converted = f.read()
    if here != converted:
      print(f"writer smoke: FAILED: the shard written here ({len(here)} bytes) is not the "
            f"conversion's ({len(converted)} bytes)", file=sys.stderr)
      return 1
    print(f"writer smoke: {result.stats['images']} images, the shard equals the conversion's "
          f"({len(here)} bytes)")
    return 0
  finally:
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())

"""Incremental conversion benchmark: a dataset version with 1% of images added and 0.1%
changed, converted three ways, interleaved, on the cached synthetic COCO images (dataset.py):

  incremental   convert --incremental --overwrite on a copy of version 1's output (cp -al:
                the copy shares version 1's files, as the cron wrapper's versions do)
  plan-from     a full conversion with --plan-from version 1 (what the incremental run's
                output must equal, byte for byte)
  full          a plain full conversion (no earlier plan)

Each is its own process, timed with run.measure (wall, CPU of the reaped process tree, peak
tree RSS), after an untimed sync; medians of --repeats interleaved runs. Version 1 (the earlier output) is converted
once, untimed. Time on a quiet machine.

  python benchmarks/incremental.py --images 20000 --repeats 3
  python benchmarks/incremental.py --smoke
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dataset as datasets  # noqa: E402
import run as harness  # noqa: E402

RUN_FILES = ("manifest.json", "README.md")


def make_v1(data: datasets.Dataset, root: str) -> Dict:
  """Version 1 of the dataset under root: images/ (hard links to the cached pool, so nothing
  is copied) and v1.json."""
  images = os.path.join(root, "images")
  os.makedirs(images, exist_ok=True)
  doc = json.load(open(data.annotations, encoding="utf-8"))
  for img in doc["images"]:
    dst = os.path.join(images, img["file_name"])
    if not os.path.exists(dst):
      os.link(os.path.join(data.images_dir, img["file_name"]), dst)
  v1 = os.path.join(root, "v1.json")
  with open(v1, "w", encoding="utf-8") as f:
    json.dump(doc, f)
  return {"images": images, "v1": v1, "doc": doc}


def make_v2(version: Dict, root: str, count: int, added: int, changed: int) -> Dict:
  """Version 2: `added` new images (with their boxes) and `changed` images drawn again under
  their names (new files: the pool's stay as they are); v2.json."""
  images, doc = version["images"], version.pop("doc")
  for k in range(added):
    index = count + k
    width, height, boxes = datasets.layout(index)
    with open(os.path.join(images, datasets.file_name(index)), "wb") as f:
      f.write(datasets.render(index))
    doc["images"].append({"id": index + 1, "file_name": datasets.file_name(index),
                          "width": width, "height": height})
    for category_id, x, y, w, h in boxes:
      doc["annotations"].append({"id": len(doc["annotations"]) + 1, "image_id": index + 1,
                                 "category_id": category_id, "bbox": [x, y, w, h],
                                 "area": round(w * h, 2), "iscrowd": 0})
  step = max(1, count // max(changed, 1))
  redrawn = []
  for k in range(changed):
    index = k * step
    path = os.path.join(images, datasets.file_name(index))
    os.remove(path)  # a new file: the link to the pool goes, the pool's image stays
    with open(path, "wb") as f:  # same size and boxes, other pixels: an edited photo
      f.write(datasets.render(index + 7_000_000))
    redrawn.append(datasets.file_name(index))
  v2 = os.path.join(root, "v2.json")
  with open(v2, "w", encoding="utf-8") as f:
    json.dump(doc, f)
  return dict(version, v2=v2, added=added, changed=redrawn)


EXTRA: List[str] = []  # --extra: options of every conversion


def convert(annotations: str, images: str, out: str, *extra: str) -> List[str]:
  return [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
          "--input", f"train={annotations}", "--images", images, "--output", out, *EXTRA,
          *extra]


def digest(directory: str) -> str:
  """SHA-256 of every file of an output but the run's manifest and card, in name order."""
  h = hashlib.sha256()
  for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name)
    if name in RUN_FILES or name.startswith(".") or not os.path.isfile(path):
      continue
    h.update(name.encode() + b"\0")
    with open(path, "rb") as f:
      data = f.read()
    if name.startswith("errors-"):  # the runner's order
      data = b"".join(sorted(data.splitlines(True)))
    h.update(data)
  return h.hexdigest()


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--added", type=float, default=0.01, help="fraction added (0.01)")
  parser.add_argument("--changed", type=float, default=0.001, help="fraction changed (0.001)")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--smoke", action="store_true", help="40 images, one repeat")
  parser.add_argument("--cache-dir", default=datasets.DEFAULT_CACHE)
  parser.add_argument("--output-json", metavar="PATH")
  parser.add_argument("--extra", action="append", default=[], metavar="ARG",
                      help="an option given to every conversion, e.g. --extra=--num-shards=256")
  args = parser.parse_args(argv)
  if args.smoke:
    args.images, args.repeats, args.added, args.changed = 40, 1, 0.05, 0.05
  EXTRA[:] = args.extra
  data = datasets.ensure_dataset(args.images, args.cache_dir)
  work = tempfile.mkdtemp(prefix="beam-tfrecord-incremental-")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  try:
    version = make_v1(data, work)
    v1_out = os.path.join(work, "out-v1")
    subprocess.run(convert(version["v1"], version["images"], v1_out, "--incremental"),
                   check=True, env=env, cwd=harness.REPO, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    version = make_v2(version, work, args.images, max(1, round(args.images * args.added)),
                      max(1, round(args.images * args.changed)))
    rows = {"incremental": [], "plan-from": [], "full": []}
    digests = {}
    summaries = []
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    for rep in range(args.repeats):
      for name in rows:
        out = os.path.join(work, f"out-{name}")
        shutil.rmtree(out, ignore_errors=True)
        if name == "incremental":
          subprocess.run(["cp", "-al", v1_out, out], check=True)
          cmd = convert(version["v2"], version["images"], out, "--incremental", "--overwrite")
        elif name == "plan-from":
          cmd = convert(version["v2"], version["images"], out, "--plan-from", v1_out)
        else:
          cmd = convert(version["v2"], version["images"], out)
        # each run writes up to the whole dataset again: flush the last one's dirty pages
        # first (untimed), or its writeback lands in the next run's time
        os.sync()
        run = harness.measure(cmd, os.path.join(logs, f"{name}-{rep}.log"), env, 8000)
        if not run.ok:
          print(f"{name} failed: {run.error}; log {run.log}", file=sys.stderr)
          return 1
        rows[name].append(run)
        digests.setdefault(name, set()).add(digest(out))
        if name == "incremental":
          summaries.append(json.load(open(os.path.join(out, "manifest.json")))["incremental"])
        print(f"  [{rep + 1}/{args.repeats}] {name:<12} {run.wall_s:7.2f} s {run.cpu_s:7.2f} "
              f"cpu-s {run.peak_rss_mb:6.0f} MB  load {run.load_avg:4.2f}", flush=True)
    medians = {name: {"wall_s": statistics.median(r.wall_s for r in runs),
                      "cpu_s": statistics.median(r.cpu_s for r in runs),
                      "peak_rss_mb": statistics.median(r.peak_rss_mb for r in runs)}
               for name, runs in rows.items()}
    same = digests["incremental"] == digests["plan-from"] and len(digests["incremental"]) == 1
    summary = summaries[-1]
    report = {"images": args.images, "added": version["added"], "extra": args.extra,
              "changed": len(version["changed"]), "repeats": args.repeats,
              "medians": medians, "incremental_summary": summary,
              "equal_to_plan_from": same,
              "wall_ratio_vs_full": medians["incremental"]["wall_s"] / medians["full"]["wall_s"],
              "wall_ratio_vs_plan_from": (medians["incremental"]["wall_s"] /
                                          medians["plan-from"]["wall_s"])}
    print(f"\n{args.images} images, {version['added']} added, {len(version['changed'])} changed"
          f" ({args.repeats} interleaved runs, medians)")
    for name, m in medians.items():
      print(f"  {name:<12} {m['wall_s']:7.2f} s  {m['cpu_s']:7.2f} cpu-s  "
            f"{m['peak_rss_mb']:6.0f} MB")
    print(f"  incremental / full: {report['wall_ratio_vs_full']:.3f} of the wall time; "
          f"/ plan-from: {report['wall_ratio_vs_plan_from']:.3f}")
    print(f"  incremental: {json.dumps(summary['images'])}, shards {json.dumps(summary['shards'])},"
          f" reused {summary['reused_images']}")
    print(f"  output equal to the full run with --plan-from: {same}")
    if args.output_json:
      with open(args.output_json, "w") as f:
        json.dump(report, f, indent=2)
    return 0 if same else 1
  finally:
    if os.environ.get("KEEP_WORK"):
      print(f"work: {work}")
    else:
      shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())

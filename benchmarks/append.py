"""Append benchmark (issue 29): a versioned output (`convert --append`) growing by 1% a night,
against a full conversion of the same sources, interleaved, on the cached synthetic COCO
images (dataset.py). Version 1 is made once, untimed; then each repeat runs, each in its own
process timed by run.measure (wall, CPU of the process tree, peak RSS), after an untimed
sync:

  full          a plain full conversion of version 2's sources (the baseline)
  append        --append onto a copy of DEST at version 1 (cp -al: it shares version 1's
                files, as versions do): 1% added
  append-mix    the same with 0.1% of images changed (new bytes, same name) and 0.1% removed
  no-change     --append with version 1's sources: nothing is published
  floor         --append with version 1's annotations written again (same content, other
                bytes): the job runs, compares every image, finds nothing changed and
                publishes nothing (the floor of any append)

For each append it reports the shard bytes it wrote (files of the new version that are not
links to version 1's), the image bytes it read (the images it encoded: added and changed),
and checks that the new version's records equal the full run's, record for record (the
multiset of record bytes: shard order differs). The machine's other load is recorded during
each run (run.measure's machine.Load: /proc/stat busy time minus the run's own CPU): a run
beside more than half a core of other work is marked disturbed. Time on a quiet machine.

  first         the first version of a versioned output (--append into a new DEST), against
                full-first, a plain full conversion of version 1's sources

  python benchmarks/append.py --images 20000 --repeats 3
  python benchmarks/append.py --small-images 200000 --repeats 3   # small_dataset.py's set
  python benchmarks/append.py --smoke
"""
from __future__ import annotations

import argparse
import collections
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
import small_dataset  # noqa: E402
import machine  # noqa: E402
import run as harness  # noqa: E402

sys.path.insert(0, harness.REPO)
from beam_tfrecord.records.tfrecord import read_record  # noqa: E402


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


def make_v2(version: Dict, root: str, count: int, added: int) -> Dict:
  """Version 2: `added` new images (with their boxes); v2.json."""
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
  v2 = os.path.join(root, "v2.json")
  with open(v2, "w", encoding="utf-8") as f:
    json.dump(doc, f)
  return dict(version, v2=v2, added=added)


EXTRA: List[str] = []  # --extra: options of every conversion


def convert(annotations: str, images: str, out: str, *extra: str) -> List[str]:
  return [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
          "--input", f"train={annotations}", "--images", images, "--output", out, *EXTRA,
          *extra]


def make_small(count: int, added: int, root: str, cache_dir: str) -> Dict:
  """--small-images: version 1 is the first count - added images of small_dataset.py's set,
  version 2 all count (its cached JSON). The images are made in root as that set makes them
  (hard links to the same few rendered files: a link to the cache's would pass ext4's
  65,000 links a file), so the mix phase's redrawn and removed files never touch the cache."""
  data = small_dataset.ensure_small_dataset(count, cache_dir)
  small_dataset.make_images(root, count)
  v1 = os.path.join(root, "v1.json")
  small_dataset.write_json(v1, count - added)
  return {"images": os.path.join(root, "images"), "v1": v1, "v2": data.annotations,
          "added_from": count - added, "name": small_dataset.file_name,
          "render": small_dataset.render}


def records_of(directory: str) -> collections.Counter:
  """The multiset of record bytes (as digests) of an output's shards."""
  manifest = json.load(open(os.path.join(directory, "manifest.json")))
  found: collections.Counter = collections.Counter()
  for split in manifest["splits"].values():
    for shard in split["shards"]:
      with open(os.path.join(directory, shard["path"]), "rb") as f:
        while True:
          record = read_record(f)
          if record is None:
            break
          found[hashlib.sha256(record).hexdigest()] += 1
  return found


def latest(dest: str) -> str:
  return os.path.join(dest, open(os.path.join(dest, "LATEST")).read().strip())


def written_bytes(new: str, old: str) -> int:
  """Bytes of the new version's shards and indexes that are not version 1's files."""
  old_inodes = {os.stat(os.path.join(old, n)).st_ino for n in os.listdir(old)}
  total = 0
  for name in os.listdir(new):
    st = os.stat(os.path.join(new, name))
    if st.st_ino not in old_inodes and name.endswith((".tfrecord", ".jsonl")):
      total += st.st_size
  return total


def make_mix(version: Dict, root: str, count: int, changed: int, removed: int) -> str:
  """Version 2's sources with `changed` more images redrawn and `removed` dropped: v3.json,
  its images in version["images3"]."""
  doc = json.load(open(version["v2"]))
  images = version["images3"]
  step = max(1, count // max(changed + removed, 1))
  name_of, render = version.get("name", datasets.file_name), version.get("render",
                                                                         datasets.render)
  picks = [name_of(k * step + 3) for k in range(changed + removed)]
  for name in picks[:changed]:
    path = os.path.join(images, name)
    os.remove(path)
    with open(path, "wb") as f:
      f.write(render(int(name[4:-4]) + 9_000_000))
  gone = set(picks[changed:])
  ids = {img["id"] for img in doc["images"] if img["file_name"] in gone}
  doc["images"] = [img for img in doc["images"] if img["id"] not in ids]
  doc["annotations"] = [a for a in doc["annotations"] if a["image_id"] not in ids]
  v3 = os.path.join(root, "v3.json")
  with open(v3, "w", encoding="utf-8") as f:
    json.dump(doc, f)
  return v3


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--small-images", type=int, metavar="N",
                      help="N small images (small_dataset.py) instead of --images photos")
  parser.add_argument("--added", type=float, default=0.01)
  parser.add_argument("--changed", type=float, default=0.001)
  parser.add_argument("--removed", type=float, default=0.001)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--smoke", action="store_true", help="40 images, one repeat")
  parser.add_argument("--cache-dir", default=datasets.DEFAULT_CACHE)
  parser.add_argument("--output-json", metavar="PATH")
  parser.add_argument("--extra", action="append", default=[], metavar="ARG")
  args = parser.parse_args(argv)
  if args.smoke:
    args.images, args.repeats, args.added, args.changed, args.removed = 40, 1, 0.05, 0.05, 0.05
  EXTRA[:] = args.extra
  count = args.small_images or args.images
  work = tempfile.mkdtemp(prefix="beam-tfrecord-append-")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  try:
    # One image folder, as a nightly job has: an image's identity is its name and path, so a
    # folder per version would make every image new. The folder goes through three states,
    # each measured in its own phase (interleaved within it): version 1 (no-change), version
    # 2 (full, append: 1% added), version 3 (full-mix, append-mix: also 0.1% redrawn, 0.1%
    # removed). The copies of DEST link its files only (cp -al): never an image, whose change
    # time the stamps compare.
    added = max(1, round(count * args.added))
    if args.small_images:
      version = make_small(count, added, work, args.cache_dir)
    else:
      version = make_v1(datasets.ensure_dataset(args.images, args.cache_dir), work)
    images = version["images"]
    v1_doc = version["v1"]
    dest1 = os.path.join(work, "dest-v1")
    subprocess.run(convert(v1_doc, images, dest1, "--append"), check=True,
                   env=env, cwd=harness.REPO, stdout=subprocess.DEVNULL)
    v1_dir = latest(dest1)
    changed = max(1, round(count * args.changed))
    removed = max(1, round(count * args.removed))
    # the floor of any append: version 1's annotations written again (other bytes, the same
    # content), so the fingerprint differs and the job runs, compares every image and finds
    # nothing changed (nothing published)
    floor_doc = os.path.join(work, "v1-rewritten.json")
    with open(v1_doc, encoding="utf-8") as f, open(floor_doc, "w", encoding="utf-8") as g:
      json.dump(json.load(f), g, indent=1)
    phases = [{"full-first": v1_doc, "first": v1_doc}, {"no-change": v1_doc, "floor": floor_doc},
              {"full": "v2", "append": "v2"}, {"full-mix": "v3", "append-mix": "v3"}]
    rows: Dict[str, List] = {n: [] for phase in phases for n in phase}
    others: Dict[str, List[float]] = {n: [] for n in rows}
    checks: Dict[str, Dict] = {}
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    full_records: Dict[str, collections.Counter] = {}
    for number, phase in enumerate(phases):
      if number == 2 and not args.small_images:
        version = make_v2(version, work, args.images, added)
      elif number == 3:
        version["images3"] = images
        v3 = make_mix(version, work, count, changed, removed)
      docs = {"v2": version.get("v2"), "v3": v3 if number == 3 else None}
      for rep in range(args.repeats):
        for name, which in phase.items():
          annotations = docs.get(which, which)
          out = os.path.join(work, f"out-{name}")
          shutil.rmtree(out, ignore_errors=True)
          if name.startswith("full"):
            cmd = convert(annotations, images, out)
          elif name == "first":  # the first version of a versioned output
            cmd = convert(annotations, images, out, "--append")
          else:
            subprocess.run(["cp", "-al", dest1, out], check=True)
            cmd = convert(annotations, images, out, "--append")
          os.sync()
          run = harness.measure(cmd, os.path.join(logs, f"{name}-{rep}.log"), env, 8000)
          other = run.other_cores
          if not run.ok:
            print(f"{name} failed: {run.error}; log {run.log}", file=sys.stderr)
            return 1
          rows[name].append(run)
          others[name].append(other)
          if name.startswith("full"):
            full_records[name] = records_of(out)
          elif name == "first":
            checks[name] = {"equal_to_full": records_of(latest(out)) == full_records[
                "full-first"]}
          elif name not in ("no-change", "floor"):
            new = latest(out)
            manifest = json.load(open(os.path.join(new, "manifest.json")))
            checks[name] = {
                "summary": manifest["incremental"], "written_bytes": written_bytes(new, v1_dir),
                "full_bytes": sum(os.path.getsize(os.path.join(new, s["path"]))
                                  for sp in manifest["splits"].values() for s in sp["shards"]),
                "equal_to_full": records_of(new) == full_records[
                    "full" if name == "append" else "full-mix"]}
          else:  # no-change, floor
            checks[name] = {"published": os.path.basename(latest(out)) != os.path.basename(v1_dir)}
          print(f"  [{rep + 1}/{args.repeats}] {name:<11} {run.wall_s:7.2f} s {run.cpu_s:7.2f} "
                f"cpu-s {run.peak_rss_mb:6.0f} MB  load {run.load_avg:4.2f}  other "
                f"{other:4.2f} cores{'  DISTURBED' if machine.disturbed(other) else ''}",
                flush=True)
    medians = {name: {"wall_s": statistics.median(r.wall_s for r in runs),
                      "cpu_s": statistics.median(r.cpu_s for r in runs),
                      "wall_spread_s": max(r.wall_s for r in runs) - min(r.wall_s for r in runs),
                      "peak_rss_mb": statistics.median(r.peak_rss_mb for r in runs),
                      "other_cores_max": max(others[name])}
               for name, runs in rows.items()}
    full = medians["full"]["wall_s"]
    for name, base in (("append-mix", "full-mix"), ("first", "full-first")):
      medians[name]["ratio_vs_its_full"] = medians[name]["wall_s"] / medians[base]["wall_s"]
    first_added = version.get("added_from", args.images)
    name_of = version.get("name", datasets.file_name)
    added_bytes = sum(os.path.getsize(os.path.join(images, name_of(first_added + k)))
                      for k in range(added))
    report = {"images": count, "small": bool(args.small_images), "added": added,
              "changed": changed, "removed": removed,
              "repeats": args.repeats, "medians": medians, "checks": checks,
              "added_image_bytes": added_bytes,
              "ratio_vs_full": {n: m["wall_s"] / full for n, m in medians.items()},
              "machine_load_at_end": os.getloadavg()[0]}
    kind = "small images" if args.small_images else "images"
    print(f"\n{count} {kind}: {added} added; mix: +{changed} changed, {removed} removed "
          f"({args.repeats} interleaved runs, medians)")
    for name, m in medians.items():
      print(f"  {name:<11} {m['wall_s']:7.2f} s (spread {m['wall_spread_s']:.2f})  "
            f"{m['cpu_s']:7.2f} cpu-s  {m['peak_rss_mb']:6.0f} MB  "
            f"{m['wall_s'] / full:.3f} of full")
    for name in ("append", "append-mix"):
      c = checks[name]
      s = c["summary"]
      print(f"  {name}: {json.dumps(s['images'])}, shards {json.dumps(s['shards'])}; wrote "
            f"{c['written_bytes'] / 1e6:.1f} MB of a {c['full_bytes'] / 1e6:.1f} MB version "
            f"({c['written_bytes'] / max(c['full_bytes'], 1):.1%})"
            + (f"; equal to the full run: {c['equal_to_full']}" if "equal_to_full" in c else ""))
    print(f"  no-change published: {checks['no-change']['published']}; floor published: "
          f"{checks['floor']['published']}; first version "
          f"{medians['first']['ratio_vs_its_full']:.3f} of its full run, equal to it: "
          f"{checks['first']['equal_to_full']}")
    print(f"  image bytes of the added images: {added_bytes / 1e6:.1f} MB")
    if args.output_json:
      with open(args.output_json, "w") as f:
        json.dump(report, f, indent=2)
    ok = (checks["append"]["equal_to_full"] and checks["append-mix"]["equal_to_full"] and
          checks["first"]["equal_to_full"] and
          not checks["no-change"]["published"] and not checks["floor"]["published"])
    return 0 if ok else 1
  finally:
    if os.environ.get("KEEP_WORK"):
      print(f"work: {work}")
    else:
      shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())

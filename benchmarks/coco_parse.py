"""COCO parse paths timed on one file: the candidates interleaved in one process, medians.

Writes the small-image benchmark's COCO JSON (small_dataset.write_json: integer, rounded or
full-precision coordinates, polygons or not; no images) and times each candidate reading
every entry of `images`, `annotations` and `categories` (the in-worker join's job), or of one
section (`*-1`: a distributed per-section task's job):

  stream     sources/coco/stream.stream_sections: ijson's events (yajl2_c) built in Python,
             the strict path (distributed tasks; the fallback of the fast one)
  scan       sources/coco/workers._all_entries: json's C scanner over 4 MB windows
             (scan.fast_sections), re-streamed by ijson where the two could differ
  items      ijson.items (C backend), one pass per section, each entry through
             sources/depth.check (a candidate: ijson's prefixes cost memory quadratic in
             the nesting, so it would also need a byte-level guard before it)
  json       json.loads of the whole file: the floor, not a streaming path
  orjson, msgspec   the same floor with orjson.loads and msgspec.json.decode (the same dicts)
  stream-1, items-1   the annotations alone
  fields-json, fields-msgspec   the annotations alone, each to the tuple the join takes
             (image_id, category_id, box as x0, y0, x1, y1, iscrowd, area): json.loads and
             sources/coco/entries.annotation_fields' checks, against msgspec's typed decode
             (its types checked in C) into a Struct of those fields (issue 37, item 5)

orjson and msgspec are not the project's dependencies (benchmarks/requirements.txt): a
candidate whose module is not installed is left out, with a line saying so.

Every candidate must give the same entries (checked once, untimed). CPU seconds of this
process (time.process_time) consuming the entries one at a time, medians of --repeats
interleaved rounds; the load average at the start and end. Results in
benchmarks/results/coco-parse-<stamp>.json.

  python benchmarks/coco_parse.py --images 50000 --repeats 5   # all six kinds of file
  python benchmarks/coco_parse.py --coordinates full --polygons yes --candidates stream,scan
  python benchmarks/coco_parse.py --smoke     # every kind of file, 2,000 images, once
"""
from __future__ import annotations

import argparse
import collections
import datetime
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Annotated, Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
import small_dataset  # noqa: E402
from dataset import DEFAULT_CACHE  # noqa: E402

RESULTS = os.path.join(HERE, "results")
SECTIONS = ("images", "annotations", "categories")


def _stream(path: str) -> Iterator[Tuple[str, Any]]:
  from beam_tfrecord.sources.coco.stream import stream_sections
  with open(path, "rb") as f:
    yield from stream_sections(f, SECTIONS, found=set(), bad=[])


def _scan(path: str) -> Iterator[Tuple[str, Any]]:
  from beam_tfrecord.sources.coco.workers import _all_entries
  return _all_entries(path, set(), [], {"key": None})


def _items(path: str, sections=SECTIONS) -> Iterator[Tuple[str, Any]]:
  import ijson

  from beam_tfrecord.sources import depth
  limit = depth.MAX_DEPTH - 2  # an entry sits in the top-level object and its array
  for section in sections:
    with open(path, "rb") as f:
      for entry in ijson.items(f, f"{section}.item", use_float=True):
        yield section, depth.check(entry, limit)


def _json(path: str) -> Iterator[Tuple[str, Any]]:
  with open(path, "rb") as f:
    doc = json.loads(f.read())
  return ((s, e) for s in SECTIONS for e in doc.get(s, []))


def _orjson(path: str) -> Iterator[Tuple[str, Any]]:
  import orjson
  with open(path, "rb") as f:
    doc = orjson.loads(f.read())
  return ((s, e) for s in SECTIONS for e in doc.get(s, []))


def _msgspec(path: str) -> Iterator[Tuple[str, Any]]:
  import msgspec
  with open(path, "rb") as f:
    doc = msgspec.json.decode(f.read())
  return ((s, e) for s in SECTIONS for e in doc.get(s, []))


def _fields_json(path: str) -> Iterator[Tuple[str, Any]]:
  from beam_tfrecord.sources.coco.entries import annotation_fields
  with open(path, "rb") as f:
    doc = json.loads(f.read())
  return (("annotations", annotation_fields(e)) for e in doc["annotations"])


def _fields_msgspec(path: str) -> Iterator[Tuple[str, Any]]:
  import msgspec

  annotation = msgspec.defstruct("Annotation", [
      ("image_id", int), ("category_id", int), ("bbox", Tuple[float, float, float, float]),
      ("iscrowd", Annotated[int, msgspec.Meta(ge=0, le=1)], 0),
      ("area", Optional[float], None)])
  Doc = msgspec.defstruct("Doc", [("annotations", List[annotation])])  # noqa: N806

  with open(path, "rb") as f:
    doc = msgspec.json.decode(f.read(), type=Doc)
  for a in doc.annotations:
    x, y, w, h = a.bbox
    yield "annotations", (a.image_id, a.category_id, (x, y, x + w, y + h), bool(a.iscrowd),
                          a.area)


def _stream_1(path: str) -> Iterator[Tuple[str, Any]]:
  from beam_tfrecord.sources.coco.stream import stream_section
  with open(path, "rb") as f:
    for entry in stream_section(f, "annotations"):
      yield "annotations", entry


CANDIDATES: Dict[str, Callable[[str], Iterator[Tuple[str, Any]]]] = {
    "stream": _stream, "scan": _scan, "items": _items, "json": _json, "orjson": _orjson,
    "msgspec": _msgspec, "stream-1": _stream_1,
    "items-1": lambda path: _items(path, ("annotations",)),
    "fields-json": _fields_json, "fields-msgspec": _fields_msgspec}
MODULES = {"orjson": "orjson", "msgspec": "msgspec", "fields-msgspec": "msgspec"}


def _group(name: str) -> str:
  """Candidates that must give the same entries: every section's, the annotations', or the
  annotations' tuples."""
  return "fields" if name.startswith("fields-") else "one" if name.endswith("-1") else "all"


def installed(names: List[str]) -> List[str]:
  """The candidates whose modules import, a line for each left out."""
  import importlib.util
  kept = []
  for name in names:
    if name in MODULES and importlib.util.find_spec(MODULES[name]) is None:
      print(f"{name}: {MODULES[name]} is not installed, left out", flush=True)
    else:
      kept.append(name)
  return kept


def _same(a: list, b: list) -> bool:
  """Equal entries, in each section's order (the paths may interleave sections apart)."""
  return all([e for s, e in a if s == section] == [e for s, e in b if s == section]
             for section in SECTIONS)


def time_file(path: str, names: List[str], repeats: int) -> Dict[str, Dict]:
  """{candidate: {"cpu_s": [...], "median_s": m}}: first every candidate's entries compared
  (untimed), then --repeats rounds, the candidates interleaved in each, each consuming its
  entries one at a time as the join does (none held)."""
  reference: Dict[str, list] = {}
  for name in names:
    entries = list(CANDIDATES[name](path))
    group = _group(name)
    if group in reference and not _same(entries, reference[group]):
      raise SystemExit(f"{name} read other entries than the first candidate in {path}")
    reference.setdefault(group, entries)
  del entries, reference
  runs: Dict[str, List[float]] = {name: [] for name in names}
  for _ in range(repeats):
    for name in names:
      gc.collect()
      start = time.process_time()
      collections.deque(CANDIDATES[name](path), maxlen=0)
      runs[name].append(time.process_time() - start)
  return {name: {"cpu_s": [round(t, 4) for t in times],
                 "median_s": round(statistics.median(times), 4)}
          for name, times in runs.items()}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--images", type=int, default=50000, help="N (default 50000)")
  parser.add_argument("--coordinates", choices=small_dataset.COORDINATES, action="append",
                      help="int, rounded, full (repeatable; default: all three)")
  parser.add_argument("--polygons", choices=("no", "yes", "both"), default="both",
                      help="a polygon per annotation (default: both kinds of file)")
  parser.add_argument("--candidates", default=",".join(CANDIDATES),
                      help=f"comma-separated, of {', '.join(CANDIDATES)}")
  parser.add_argument("--repeats", type=int, default=5, help="rounds (default 5)")
  parser.add_argument("--cache-dir", default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
  parser.add_argument("--output-json", help="default benchmarks/results/coco-parse-STAMP.json")
  parser.add_argument("--smoke", action="store_true",
                      help="2,000 images, every kind of file, one round, in a temporary folder")
  args = parser.parse_args(argv)
  names = args.candidates.split(",")
  unknown = sorted(set(names) - set(CANDIDATES))
  if unknown:
    parser.error(f"unknown candidates {unknown}")
  names = installed(names)
  work = tempfile.mkdtemp(prefix="coco-parse-smoke-") if args.smoke else \
      os.path.join(args.cache_dir, "coco-parse")
  if args.smoke:
    args.images, args.repeats = 2000, 1
  os.makedirs(work, exist_ok=True)
  import ijson

  import beam_tfrecord.sources.coco.workers  # noqa: F401  (Beam's import, before any timing)
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  report = {"created": stamp, "images": args.images, "repeats": args.repeats,
            "ijson_backend": ijson.backend, "python": sys.version.split()[0],
            "load_avg_at_start": os.getloadavg(), "files": {}}
  print(f"N={args.images}, {args.repeats} round(s), ijson backend {ijson.backend}, "
        f"load average {os.getloadavg()[0]:.2f}; CPU seconds, medians", flush=True)
  try:
    for coordinates in args.coordinates or small_dataset.COORDINATES:
      for polygons in {"no": [False], "yes": [True], "both": [False, True]}[args.polygons]:
        name = f"coco-{args.images}-{coordinates}{'-poly' if polygons else ''}.json"
        path = os.path.join(work, name)
        if not os.path.exists(path):
          small_dataset.write_json(path + ".tmp", args.images, coordinates, polygons)
          os.replace(path + ".tmp", path)
        found = time_file(path, names, args.repeats)
        report["files"][name] = {"bytes": os.path.getsize(path), "candidates": found}
        print(f"{name:34s} {os.path.getsize(path) / 1e6:6.1f} MB  " + "  ".join(
            f"{n} {found[n]['median_s']:.3f}" for n in names), flush=True)
    report["load_avg_at_end"] = os.getloadavg()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    output = args.output_json or (os.path.join(work, "results.json") if args.smoke else
                                  os.path.join(RESULTS, f"coco-parse-{stamp}.json"))
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as f:
      json.dump(report, f, indent=1)
    print(f"results: {output}")
  finally:
    if args.smoke:
      shutil.rmtree(work, ignore_errors=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

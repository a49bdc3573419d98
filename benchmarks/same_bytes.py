"""Are the shards byte-identical to another commit's? Every format, two runner modes.

  python benchmarks/same_bytes.py --tree base=/path/to/other/checkout
  python benchmarks/same_bytes.py --tree base=DIR --formats coco,voc --modes in_process

A commit that touches a per-image path must leave every record as it was (issue 37). This
makes one generated dataset (the tests' own: images of several formats and sizes, with the
tests' writers for each labelling tool's layout, and a COCO file with every kind of
segmentation), converts it in each format with this checkout and with each --tree, on the
in-process runner and on multi_processing, and compares every file of each output that carries
no time (shards, label maps, the manifest without its times) byte for byte, and the error files'
records (their order is the workers').
Exit 0 when every output is identical, 1 otherwise (the first differences are printed).
Conversions run as processes with the tree's code (PYTHONPATH), two at a time.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TESTS = os.path.join(REPO, "tests")

MODES = {
    "in_process": [],
    "multi_processing": ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                         "--direct_num_workers=2"],
}
# manifest fields that carry a time, a path or a file stamp of the run (the rest must match)
VOLATILE = {"created", "created_at", "finished", "started", "duration_seconds", "run_id",
            "args", "output", "tool_version", "tfds_root", "stamps", "previous"}


def make_sources(root: Path) -> Dict[str, List[str]]:
  """{name: convert arguments} of one dataset in every format the tool reads."""
  sys.path.insert(0, TESTS)
  import conftest  # noqa: E402  (the tests' generators: real layouts of each tool)
  import coco_masks
  import layouts
  import layouts_cvat
  import layouts_labelbox
  import layouts_labelme
  import layouts_openimages
  import layouts_yolo_keras
  ds = conftest.make_dataset(root / "data", count=30, seed=7)
  images = ds.images
  yolo = layouts.write_ultralytics(images, ds.image_dir, root / "yolo")
  folders = layouts.write_class_folders(images, ds.image_dir, root / "folders")
  lm = layouts_labelme.write_labelme(images, ds.image_dir, root / "labelme", polygons=True)
  cvat = layouts_cvat.write_cvat(images, ds.image_dir, root / "cvat")
  lb = layouts_labelbox.write_labelbox(images, ds.image_dir, root / "labelbox")
  oid = layouts_openimages.write_openimages(images, ds.image_dir, root / "oid")
  keras = layouts_yolo_keras.write_yolo_keras(images, ds.image_dir, root / "keras",
                                              style="roboflow")
  masks = coco_masks.make_coco(root / "masks")
  return {
      "coco": ["--format=coco", *ds.inputs("coco"), "--num-shards=3"],
      "coco-masks": ["--format=coco", f"--input={masks}", f"--images={masks.parent / 'images'}",
                     "--include-masks"],
      "coco-objects": ["--format=coco", *ds.inputs("coco"), "--schema=coco-objects"],
      "voc": ["--format=voc", *ds.inputs("voc"), "--records-per-shard=7"],
      "csv": ["--format=csv", *ds.inputs("csv"), "--schema=tutorial"],
      "yolo": ["--format=yolo", f"--input={yolo}"],
      "folders": ["--format=folders", f"--input={folders}"],
      "labelme": ["--format=labelme", f"--input={lm}"],
      "cvat": ["--format=cvat", f"--input={cvat}"],
      "labelbox": ["--format=labelbox", f"--input={lb}", f"--images={lb.parent / 'images'}"],
      "openimages": ["--format=openimages",
                     *[f"--input={p}" for p in sorted(oid.glob("*-annotations-bbox.csv"))]],
      "yolo-keras": [f"--input={keras}"],  # a Roboflow export folder: detected
  }


def convert(tree: str, args: List[str], output: Path) -> Tuple[int, str]:
  env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="2")
  done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "convert", *args,
                         f"--output={output}"], cwd=tree, env=env, capture_output=True,
                        text=True)
  lines = done.stderr.strip().splitlines()
  return done.returncode, lines[-1] if lines else ""


def _manifest(path: Path) -> dict:
  def strip(value):
    if isinstance(value, dict):
      return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
      return [strip(v) for v in value]
    return value
  return strip(json.loads(path.read_text(encoding="utf-8")))


def differences(a: Path, b: Path, ordered_errors: bool = False) -> List[str]:
  """What differs between two outputs, every file of the tree (README.md cards aside: they
  name the output's path and the run's time; manifest.json without its times; TFDS's
  dataset_info.json without the output's own path). Error files compare as records (their
  order is the workers': multi_processing gave two orders in two runs of one commit), or
  byte for byte with `ordered_errors`."""
  files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file() and not _hidden(p, a)}
  files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and not _hidden(p, b)}
  found = ([f"only in one output: {sorted(map(str, files_a ^ files_b))}"]
           if files_a != files_b else [])
  for rel in sorted(files_a & files_b):
    x, y = a / rel, b / rel
    if rel.name == "README.md":
      continue
    if rel.name == "manifest.json":
      same = _manifest(x) == _manifest(y)
    elif rel.name == "dataset_info.json":
      same = x.read_text().replace(str(a), "OUT") == y.read_text().replace(str(b), "OUT")
    elif rel.name.startswith("errors-") and rel.suffix == ".jsonl" and not ordered_errors:
      same = sorted(x.read_bytes().splitlines()) == sorted(y.read_bytes().splitlines())
    else:
      same = x.read_bytes() == y.read_bytes()
    if not same:
      found.append(f"{rel} differs")
  return found


def _hidden(path: Path, root: Path) -> bool:
  return any(part.startswith(".") for part in path.relative_to(root).parts)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--tree", action="append", required=True, metavar="NAME=DIR",
                      help="another checkout to compare with (DIR/beam_tfrecord); repeatable")
  parser.add_argument("--formats", help="comma-separated subset of the sources (default: all)")
  parser.add_argument("--modes", default=",".join(MODES),
                      help=f"runner modes, comma-separated (default: {','.join(MODES)})")
  parser.add_argument("--keep", action="store_true", help="keep the outputs (path printed)")
  args = parser.parse_args(argv)
  trees = {"this": REPO}
  for item in args.tree:
    name, _, path = item.partition("=")
    if not os.path.isdir(os.path.join(path, "beam_tfrecord")):
      parser.error(f"--tree {item!r}: expected NAME=DIR with DIR/beam_tfrecord")
    trees[name] = os.path.abspath(path)
  modes = [m for m in args.modes.split(",") if m]
  if any(m not in MODES for m in modes):
    parser.error(f"--modes: choose from {', '.join(MODES)}")
  work = Path(tempfile.mkdtemp(prefix="beam-tfrecord-same-bytes-"))
  try:
    sources = make_sources(work / "src")
    if args.formats:
      wanted = args.formats.split(",")
      unknown = [f for f in wanted if f not in sources]
      if unknown:
        parser.error(f"--formats: unknown {unknown}; choose from {', '.join(sources)}")
      sources = {f: sources[f] for f in wanted}
    jobs = {(fmt, mode, tree): (trees[tree], [*fmt_args, *MODES[mode]],
                                work / "out" / f"{fmt}-{mode}-{tree}")
            for fmt, fmt_args in sources.items() for mode in modes for tree in trees}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
      results = dict(zip(jobs, pool.map(lambda job: convert(*job), jobs.values())))
    failures = 0
    for fmt in sources:
      for mode in modes:
        outs = {tree: jobs[(fmt, mode, tree)][2] for tree in trees}
        codes = {tree: results[(fmt, mode, tree)] for tree in trees}
        if len({c for c, _ in codes.values()}) != 1 or any(
            not (outs[t] / "manifest.json").exists() for t in trees):
          failures += 1
          print(f"{fmt} {mode}: exit codes {codes}")
          continue
        found = [f"{tree}: {d}" for tree in trees if tree != "this"
                 for d in differences(outs["this"], outs[tree])]
        failures += bool(found)
        shards = len(list(outs["this"].glob("*.tfrecord")))
        print(f"{fmt:12} {mode:16} exit {codes['this'][0]}, {shards} shards: "
              + ("identical" if not found else "; ".join(found[:4])))
    print("every output identical" if not failures else f"{failures} output(s) differ")
    return 1 if failures else 0
  finally:
    if args.keep:
      print(f"outputs kept in {work}")
    else:
      shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())

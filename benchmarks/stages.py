"""Where variant (1)'s time goes: run it once under py-spy and sum the samples by stage.

  python benchmarks/stages.py --images 2000 [--beam-args "--direct_running_mode=..."]
  python benchmarks/stages.py --raw existing-py-spy-raw.txt      # only summarise

Needs py-spy (`pip install py-spy`; sampling another process needs ptrace rights, e.g. root).
Samples are wall-clock samples of every thread of every process in the tree (py-spy
--subprocesses, without --idle), so a share is "share of the sampled CPU work". Native code
(sha256, protobuf, file reads, Pillow) is charged to the Python function that called it.
"""
from __future__ import annotations

import argparse
import collections
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import dataset as datasets  # noqa: E402
from run import _attach_beam_args  # noqa: E402

# First match wins, tried from the innermost frame outwards: (substring of a frame, stage).
USER_STAGES = (
    ("read_bytes (beam_tfrecord/encode.py", "write: read image bytes"),
    ("fetch (beam_tfrecord/encode.py", "write: read image bytes + sha256 (read-ahead)"),
    ("(beam_tfrecord/prefetch.py", "write: read-ahead bookkeeping"),
    ("(beam_tfrecord/coders.py", "coders: records to and from tuples"),
    ("(beam_tfrecord/images.py", "write: sniff / header probe (Pillow)"),
    ("(beam_tfrecord/schemas/", "write: build + serialize Example (incl. sha256)"),
    ("(beam_tfrecord/boxes.py", "write: build + serialize Example (incl. sha256)"),
    ("write_record (apache_beam/io/tfrecordio.py", "write: TFRecord framing + CRC + file write"),
    ("_WriteShard", "write: other (sort, stats, rename)"),
    ("_Finalize", "finalize: manifest, label map"),
    ("_ParseSection", "source: stream COCO JSON (ijson)"),
    ("join_image", "source: join images + objects, resolve paths"),
    ("_locate", "prepare: stat image files"),
    ("_first_of_duplicates", "prepare: de-duplicate"),
    ("unique_files", "write: de-duplicate within the shard"),
    ("_PlanFn", "plan shards (combine)"),
    ("plan_split", "plan shards"),
)


def stage_of(frames: List[str]) -> str:
  if len(frames) < 2:  # just the process: no Python frame
    return "no Python frame (native, interpreter start/exit)"
  text = ";".join(frames)
  if "process_bundle" in text:
    for frame in reversed(frames):
      for needle, stage in USER_STAGES:
        if needle in frame:
          return stage
    return "Beam per-element work (coders, shuffles, bundles)"
  if "run_pipeline" in text:
    if "_load_unlocked" in text:
      return "imports (during run)"
    return "runner: translate and plan the pipeline"
  if "build (beam_tfrecord/pipeline.py" in text or "Pipeline.apply" in text:
    return "construct the pipeline graph"
  if "_load_unlocked" in text:
    return "imports (start-up)"
  if "Thread._bootstrap" in text:
    return "other threads (gRPC, progress, state sampler)"
  return "other (argument parsing, output checks)"


def summarize(raw: str) -> Dict[str, int]:
  """{stage: samples} from py-spy's raw (collapsed stack) output."""
  stages: Dict[str, int] = collections.Counter()
  with open(raw) as f:
    for line in f:
      stack, _, count = line.rstrip("\n").rpartition(" ")
      stages[stage_of(stack.split(";"))] += int(count)
  return dict(stages)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=2000, help="dataset size (default 2000)")
  parser.add_argument("--beam-args", default="", help="Beam options for the run, one string")
  parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
  parser.add_argument("--raw", help="summarise this py-spy raw file instead of running")
  parser.add_argument("--cache-dir", default=datasets.DEFAULT_CACHE)
  args = parser.parse_args(_attach_beam_args(sys.argv[1:]))
  raw = args.raw
  if raw is None:
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
      parser.error("py-spy not found: pip install py-spy")
    data = datasets.ensure_dataset(args.images, args.cache_dir)
    work = tempfile.mkdtemp(prefix="stages-")
    raw = os.path.join(work, "py-spy.txt")
    cmd = [spy, "record", "--subprocesses", "-r", str(args.rate), "-f", "raw", "-o", raw, "--",
           sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
           "--input", f"train={data.annotations}", "--images", data.images_dir,
           "--output", os.path.join(work, "out"), *shlex.split(args.beam_args)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    subprocess.run(cmd, check=True, cwd=REPO, env=env)
    shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
  stages = summarize(raw)
  total = sum(stages.values()) or 1
  print(f"\n{'stage':<52} {'samples':>8} {'share':>6}")
  for stage, samples in sorted(stages.items(), key=lambda kv: -kv[1]):
    print(f"{stage:<52} {samples:8d} {samples / total:6.1%}")
  print(f"raw profile: {raw}")
  return 0


if __name__ == "__main__":
  sys.exit(main())

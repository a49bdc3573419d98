"""Where the time goes, per image: one conversion under py-spy, in microseconds of CPU per image
for each stage of the pipeline (issue 32, item 2).

  python benchmarks/stages.py --images 20000 --markdown        # the cached ~90 KB JPEG set
  python benchmarks/stages.py --small-images 1000000 --markdown  # 64x48 JPEGs, 2 boxes each
  python benchmarks/stages.py --images 2000 \\
      --beam-args "--direct_running_mode=multi_processing --direct_num_workers=2"
  python benchmarks/stages.py --raw benchmarks/results/stages-STAMP.txt   # summarise again

How: `py-spy record --subprocesses --nonblocking -f raw` runs the conversion (row (1) of run.py:
`beam-tfrecord convert --format coco` with its defaults, plus --beam-args) and samples every
thread of every process of its tree, writer and Beam worker processes included, without
--idle (a thread waiting is not sampled; one ready to run is, as if running: on a machine
with cores to spare, samples follow CPU). A small wrapper process
between py-spy and the conversion waits for it and reports the tree's user+sys CPU seconds
(getrusage of its waited-for children, or psutil's samples of the tree if larger, as
run.measure does): py-spy's own CPU is not in it, and the wrapper's samples are left out. Each
sample goes to one stage (stage_of); a stage's cost is

  share of the samples x tree CPU seconds / images x 1e6   (microseconds of CPU per image)

taken per process: a process's samples share out its own CPU seconds (psutil's, every 50 ms),
and the stages are scaled to add up to the tree's (stage_seconds says why). Start-up and other
fixed costs are spread over the images too: compare two sizes to tell them apart. Native code
(sha256, CRC32C, protobuf, file reads, Pillow, json's scanner) is charged to the Python frame
that called it. The load around the run is recorded as run.py does (run.measure, machine.Load:
the profiler's CPU counts as ours); a run beside more than --max-other-cores of other work is
marked disturbed, not refused: profile it again.

The raw profile goes to benchmarks/results/stages-STAMP.txt and the report beside it (.json),
so that `--raw` can summarise it again after the stage mapping changes.
Needs py-spy (benchmarks/requirements.txt; sampling needs ptrace rights, e.g. root).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
# benchmarks/ is not a package: dataset, run, machine and small_dataset are imported where they
# are used, so that the wrapper (this file, run between py-spy and the conversion) starts fast

# ---------------------------------------------------------------------------------------------
# The stages, in pipeline order (the list, then the fixed costs and the rest).
START = "start-up imports"
CONSTRUCT = "pipeline construction"
SOURCE = "source parse"
SELECT = "select"
LOCATE = "locate"
PACK = "pack"
SPILL = "partition and spill"
SORT = "sort"
PLAN = "plan"
READBACK = "run read-back"
READ = "image read"
ENCODE = "encode"
WRITE = "frame and write"
COPIES = "copies by content"
FINALIZE = "finalize"
BEAM = "Beam overhead between transforms"
OTHER = "other"
STAGES = (START, CONSTRUCT, SOURCE, SELECT, LOCATE, PACK, SPILL, SORT, PLAN, READBACK, READ,
          ENCODE, WRITE, COPIES, FINALIZE, BEAM, OTHER)

# (needle, stage) for beam_tfrecord's frames, looked up from the innermost frame of a sample
# outwards (stage_of). A needle starting with "(" matches a module anywhere in the frame
# ("(beam_tfrecord/sources/"); any other must begin the frame: a function (its qualified name)
# in its file, "unpack (beam_tfrecord/records/packed.py". A function needle wins over a module
# needle. stage None: a helper several stages call, whose cost belongs to its caller (the
# next frame out). A beam_tfrecord frame that matches nothing goes to "other" (--unmapped
# lists them: add them here).
FRAME_STAGES: Tuple[Tuple[str, Optional[str]], ...] = (
    # source parse: the annotation files to ImageAnnotations. COCO on the local runner:
    # _JoinFile (sources/coco/workers.py) reads each file through json's C scanner over
    # windows (scan.py; ijson's events in stream.py when the scanner hands the file back),
    # checks each entry (entries.py), buffers and spills images and objects by image id
    # (buffer.py, through storage/spill.py) and joins each image with its objects
    # (join.join_image); distributed, _ParseSection and a CoGroupByKey. Other formats: their
    # sources/ module.
    ("(beam_tfrecord/sources/", SOURCE),
    # select: --classes / --class-map (prepare/select, class_selection), and the label map
    # (class names to ids, O(classes): prepare/labels, records/label_map)
    ("(beam_tfrecord/prepare/select.py", SELECT),
    ("(beam_tfrecord/prepare/class_selection.py", SELECT),
    ("(beam_tfrecord/prepare/labels.py", SELECT),
    ("(beam_tfrecord/records/label_map.py", SELECT),
    # locate: each image's file found and its size taken, its split assigned
    # (prepare/locate, splitting, bounds). COCO's join resolves and stats each image itself
    # (paths.resolve_sized, under join_image): that is locating too, and counts here; Locate
    # then keeps the size it was given.
    ("(beam_tfrecord/prepare/locate.py", LOCATE),
    ("(beam_tfrecord/prepare/splitting.py", LOCATE),
    ("(beam_tfrecord/prepare/bounds.py", LOCATE),
    ("resolve_sized (beam_tfrecord/storage/paths.py", LOCATE),
    ("file_size (beam_tfrecord/storage/paths.py", LOCATE),
    # pack: an ImageAnnotation to packed.Packed (routing fields, the key's 64-bit hash, the
    # annotation as marshal bytes) in build()'s Pack lambda, the schema's record count
    # (planned_records); and records/coders' DataclassCoder, which turns annotations into
    # bytes where Beam encodes them between transforms. (build()'s other lambdas run once
    # per shard or per error.)
    ("pack (beam_tfrecord/records/packed.py", PACK),
    ("pack_plain (beam_tfrecord/records/packed.py", PACK),
    ("Schema.records_counter.<locals>", PACK),
    # records/batches: a batch made of a source's images (the tuples the pack marshals),
    # an image's split and size set (locate), the class names of a batch (the label map), and
    # a batch made ImageAnnotations again for a step that needs them (its caller's)
    ("of (beam_tfrecord/records/batches.py", PACK),
    ("with_split_and_size (beam_tfrecord/records/batches.py", LOCATE),
    ("class_names (beam_tfrecord/records/batches.py", SELECT),
    ("annotations (beam_tfrecord/records/batches.py", None),
    ("(beam_tfrecord/records/batches.py", PACK),
    ("build.<locals>.<lambda> (beam_tfrecord/pipeline.py", PACK),
    ("_one_record (beam_tfrecord/schemas/__init__.py", PACK),
    ("Schema.records_counter (beam_tfrecord/schemas/__init__.py", PACK),
    ("Schema.planned_records (beam_tfrecord/schemas/__init__.py", PACK),
    ("planned_records (beam_tfrecord/schemas/", PACK),
    ("(beam_tfrecord/records/coders.py", PACK),
    # partition and spill: each packed image appended to its partition's spill file
    # (plan/transform._SpillPartitions, storage/spill), and the spill files read back and
    # unmarshalled by the sort (the list comprehension in _SortRuns.process). With a shuffle
    # instead (distributed runners), the partitioning is Beam's GroupByKey: Beam overhead.
    ("_SpillPartitions.", SPILL),
    ("_SortRuns.process.<locals>.<listcomp> (beam_tfrecord/plan/transform.py", SPILL),
    # sort: each run's partitions sorted by (split, hash, key, uri), duplicates found
    # (shard_plan.sort_partition), and written as run files (plan/runs.write_run)
    ("_SortRuns.", SORT),
    ("sort_partition (beam_tfrecord/plan/shard_plan.py", SORT),
    ("sort_partition.<locals>", SORT),
    ("order_key (beam_tfrecord/plan/shard_plan.py", SORT),
    ("write_run (beam_tfrecord/plan/runs.py", SORT),
    ("write_run.<locals>", SORT),
    # --append: the sort's comparison with the earlier version's catalog (plan/compare: its
    # rows read, each image's stamp and annotation digest) and the earlier files' check
    ("(beam_tfrecord/plan/compare.py", SORT),
    # plan: the runs' counts (add_counts, one call per image in _SortRuns), the combine into a
    # ShardPlan (_PlanFn, make_plan, plan_split), --plan-from's bounds, the shard tasks and
    # each task's runs (plan/runs.shard_runs)
    ("add_counts (beam_tfrecord/plan/shard_plan.py", PLAN),
    ("counts_below_bounds (beam_tfrecord/plan/shard_plan.py", PLAN),
    ("_PlanFn.", PLAN),
    ("PlanShards.expand.<locals>", PLAN),
    ("shard_tasks (beam_tfrecord/plan/transform.py", PLAN),
    ("shard_runs (beam_tfrecord/plan/runs.py", PLAN),
    ("(beam_tfrecord/plan/shard_plan.py", PLAN),
    ("(beam_tfrecord/plan/previous.py", PLAN),
    ("(beam_tfrecord/plan/transform.py", PLAN),
    # run read-back: the shard writer reading its range of the sorted runs (plan/runs.read_run,
    # select) and unpacking each annotation (packed.unpack: marshal, dataclasses rebuilt)
    ("read_run (beam_tfrecord/plan/runs.py", READBACK),
    ("select (beam_tfrecord/plan/runs.py", READBACK),
    ("unpack (beam_tfrecord/records/packed.py", READBACK),
    # image read: the image's bytes (storage/files.read_bytes and its safe opens; gs:// reads),
    # their SHA-256 (write/encode.fetch: native, charged to fetch), the read-ahead
    # (storage/prefetch, write_shard's fetch lambdas), and the header probe / checks / optional
    # re-encode of write/images.py (images.prepare)
    ("read_bytes (beam_tfrecord/storage/files.py", READ),
    ("_read_local (beam_tfrecord/storage/files.py", READ),
    ("_read_gcs (beam_tfrecord/storage/files.py", READ),
    ("_read_embedded (beam_tfrecord/storage/files.py", READ),
    ("_open_beneath (beam_tfrecord/storage/files.py", READ),
    ("_walk_open (beam_tfrecord/storage/files.py", READ),
    ("_open_link (beam_tfrecord/storage/files.py", READ),
    ("_below (beam_tfrecord/storage/files.py", READ),
    ("_too_large (beam_tfrecord/storage/files.py", READ),
    ("open_local (beam_tfrecord/storage/files.py", READ),
    ("fetch (beam_tfrecord/write/encode.py", READ),
    ("fetch_image (beam_tfrecord/write/encode.py", READ),
    ("read_image (beam_tfrecord/write/encode.py", READ),
    ("write_shard.<locals>.<lambda> (beam_tfrecord/write/shard_writer.py", READ),
    ("(beam_tfrecord/storage/prefetch.py", READ),
    ("(beam_tfrecord/storage/gcs.py", READ),
    ("(beam_tfrecord/write/images.py", READ),
    # encode: the annotation checked against the image and put in its frame (write/encode.
    # convert, orientation), boxes normalised (records/boxes), the Example built and
    # serialized (schemas/*, records/protos' ExampleLayout; masks rasterized); --sink beam's
    # _Encode DoFn
    ("image_root (beam_tfrecord/write/encode.py", None),  # the read's helper
    ("(beam_tfrecord/write/encode.py", ENCODE),
    ("(beam_tfrecord/write/orientation.py", ENCODE),
    ("(beam_tfrecord/schemas/", ENCODE),
    ("(beam_tfrecord/records/protos.py", ENCODE),
    ("(beam_tfrecord/records/boxes.py", ENCODE),
    ("(beam_tfrecord/records/masks.py", ENCODE),
    ("(beam_tfrecord/records/keypoints.py", ENCODE),
    ("_Encode.", ENCODE),
    # frame and write: TFRecord framing and CRC32C (records/tfrecord.py), the shard writer's
    # loop and file writes (write/shard_writer.write_shard: its own lines), the shard's
    # progress counter, the shard file of its --file-format, the catalog of versions (--append: the partition written, an earlier
    # file kept or rewritten: write/segments), the DoFn that hands shards to writer processes
    ("ShardCounter.", WRITE),
    ("(beam_tfrecord/records/tfrecord.py", WRITE),
    ("(beam_tfrecord/write/shard_writer.py", WRITE),
    ("(beam_tfrecord/write/segments.py", WRITE),
    ("(beam_tfrecord/storage/catalog.py", WRITE),
    ("(beam_tfrecord/storage/record_files.py", WRITE),
    ("(beam_tfrecord/write/transform.py", WRITE),
    ("_WriteShard.", WRITE),
    # the write's set-up: gc.collect + malloc_trim, once per DoFn instance
    ("release_freed_memory (beam_tfrecord/storage/processes.py", WRITE),
    # copies by content: each written image's (SHA-256, split, key, uri) handed on by the
    # writer (write/contents: Tapped keeps the digest the read computed), spilled by digest
    # and grouped (write/leakage.FindCopies), reported as leaked_across_splits /
    # duplicate_content warnings
    ("Tapped.__call__ (beam_tfrecord/write/contents.py", READ),  # what is under it: the
    # read, or the wait for the read-ahead's result
    ("(beam_tfrecord/write/contents.py", COPIES),
    ("(beam_tfrecord/write/leakage.py", COPIES),
    # finalize: the errors file (write/errors_file: its parts sorted and assembled),
    # manifest, label map, card, shard names, the journaled swap (finalize/*,
    # records/manifest)
    ("(beam_tfrecord/write/errors_file.py", FINALIZE),
    ("(beam_tfrecord/finalize/", FINALIZE),
    ("(beam_tfrecord/records/manifest.py", FINALIZE),
    ("(beam_tfrecord/storage/versions.py", FINALIZE),  # --append's versions
    # other: the CLI (options, lock, outcome line), the config, the progress line's thread

    ("(beam_tfrecord/cli/", OTHER),
    ("(beam_tfrecord/config.py", OTHER),
    ("(beam_tfrecord/storage/progress.py", OTHER),
    # worker processes' task loops and the pipes to them (storage/processes: the shard
    # writers, the COCO join's partitions): pickled tasks and answers
    ("(beam_tfrecord/storage/processes.py", OTHER),
    # helpers: charged to their caller
    ("(beam_tfrecord/storage/spill.py", None),
    ("(beam_tfrecord/storage/paths.py", None),
    ("(beam_tfrecord/storage/files.py", None),
    ("(beam_tfrecord/storage/layout.py", None),
    ("(beam_tfrecord/storage/lines.py", None),  # line sources' byte ranges: the source's
    ("(beam_tfrecord/plan/runs.py", None),
    ("(beam_tfrecord/records/packed.py", None),
    ("(beam_tfrecord/records/plain.py", None),
    ("(beam_tfrecord/records/model.py", None),
    ("(beam_tfrecord/plan/naming.py", None),
    ("(beam_tfrecord/reasons.py", None),
    ("(beam_tfrecord/errors.py", None),
    ("identity_hash (beam_tfrecord/records/packed.py", None),
    ("partition_of (beam_tfrecord/plan/shard_plan.py", None),
)
# function needles first (a stable sort keeps the table's order within each kind)
_LOOKUP = tuple(sorted(FRAME_STAGES, key=lambda entry: entry[0].startswith("(")))
_UNMAPPED = object()

# A sample is inside the pipeline's work when one of these frames is on its stack; only the
# frames inside the innermost one are looked up: a sample there without a beam_tfrecord frame
# is Beam's own work between our functions (bundles, coders, side inputs, the in-memory
# runner's buffers and shuffles, DoFn set-up).
WORK_ROOTS = (
    "SdkWorker.process_bundle (apache_beam/runners/worker/sdk_worker.py",
    "BundleProcessor.process_bundle (apache_beam/runners/worker/bundle_processor.py",
    "FnApiRunner.run_stages (apache_beam/runners/portability/fn_api_runner/fn_runner.py",
    "Thread._bootstrap (threading.py",  # a thread: Beam's, the read-ahead's, the writer pool's
)
# Outside the work: building the graph (pipeline.build and Beam's apply), and the runner's
# translation of it before the first bundle (to_runner_api, fusion, stages)
CONSTRUCTION = (
    "build (beam_tfrecord/pipeline.py",
    "build_pipeline (beam_tfrecord/cli/process.py",
    "Pipeline.apply (apache_beam/pipeline.py",
    "Pipeline.__init__ (apache_beam/pipeline.py",
    "Pipeline.run (apache_beam/pipeline.py",
    "run_pipeline (apache_beam/",
)
IMPORT = "_find_and_load (<frozen importlib._bootstrap>"  # a module being loaded
# The outermost frame of a whole stack: a process's main module or -c code, or a thread. A
# stack that starts elsewhere lost its outer frames (py-spy read it while it changed, without
# pausing the process) and cannot be placed unless a frame of ours is in it.
BOTTOMS = ("_run_module_as_main (<frozen runpy>", "<module> (", "Thread._bootstrap (threading.py")
# A thread whose target is native code shows Thread.run alone: Beam's state sampler (Cython);
# every thread of ours runs Python
NATIVE_THREAD = "Thread.run (threading.py"
BEAM_WORKER = "apache_beam.runners.worker"  # a Beam worker process's command (multi_processing)
# Beam's own code, and the gRPC it talks to its workers through
BEAM_CODE = ("(apache_beam/", "(grpc/")
WRAPPER = "_wrapper_main ("  # this file between py-spy and the conversion: left out


def _lookup(frame: str):
  for needle, stage in _LOOKUP:
    if frame.startswith(needle) if needle[0] != "(" else needle in frame:
      return stage
  return _UNMAPPED


def _short(frame: str) -> str:
  """A frame without its line number: 'join_image (beam_tfrecord/sources/coco/join.py)'."""
  return re.sub(r":\d+\)$", ")", frame)


def classify(frames: Sequence[str], cmd: str = "") -> Tuple[str, str]:
  """(stage, detail) of one sample's Python frames, outermost first, in the process of
  command line `cmd`. detail names what decided: the frame that matched, the module being
  imported, the innermost Beam frame."""
  if not frames:  # no Python frame: a Beam worker's gRPC threads (native), else the
    # interpreter starting or exiting
    if BEAM_WORKER in cmd:
      return BEAM, "no Python frame (a Beam worker process)"
    return START, "no Python frame"
  if any(IMPORT in f for f in frames):
    first = next(i for i, f in enumerate(frames) if IMPORT in f)
    loaded = next((f for f in frames[first:] if f.startswith("<module> (")), frames[-1])
    return START, _short(loaded)
  roots = [i for i, f in enumerate(frames) if f.startswith(WORK_ROOTS)]
  if not roots:
    built = next((f for f in frames if f.startswith(CONSTRUCTION)), None)
    if built:
      return CONSTRUCT, _short(built)
  inner = frames[roots[-1] + 1:] if roots else frames
  ours = None  # the innermost helper frame of ours seen (a helper whose caller is Beam's)
  for frame in reversed(inner):
    if "(beam_tfrecord/" not in frame:
      continue
    stage = _lookup(frame)
    if stage is _UNMAPPED:
      return OTHER, "unmapped: " + _short(frame)
    if stage is not None:
      return stage, _short(frame)
    ours = ours or frame
  if ours:
    return OTHER, "helper called by Beam: " + _short(ours)
  beam = next((f for f in reversed(inner) if any(code in f for code in BEAM_CODE)), None)
  if beam or (roots and not frames[roots[-1]].startswith("Thread._bootstrap")):
    return BEAM, _short(beam or frames[roots[-1]])
  if roots and frames[-1].startswith(NATIVE_THREAD):
    return BEAM, "a native thread (Beam's state sampler)"
  if not frames[0].startswith(BOTTOMS):
    return OTHER, "torn stack: " + _short(frames[-1])
  return OTHER, _short(frames[-1])


def stage_of(frames: Sequence[str], cmd: str = "") -> str:
  """The stage of one sample's Python frames (outermost first)."""
  return classify(frames, cmd)[0]


_PROCESS = re.compile(r'process (\d+):"(.*?)"(?:;|$)')


def parse_line(line: str) -> Tuple[Optional[int], str, List[str], int]:
  """(pid, command line, Python frames outermost first, samples) of one line of py-spy's raw
  output ('process 12:"cmd";f1 (file:1);f2 (file:2) 7'), of its innermost process frame (a
  subprocess's line starts with its parents' process frames); pid None without --subprocesses."""
  stack, _, count = line.rstrip("\n").rpartition(" ")
  pid, cmd = None, ""
  while True:  # a subprocess's stack starts with its parents' process frames
    found = _PROCESS.match(stack)
    if not found:
      break
    pid, cmd = int(found.group(1)), found.group(2)
    stack = stack[found.end():]
  return pid, cmd, [f for f in stack.split(";") if f], int(count)


@dataclasses.dataclass
class Profile:
  """A raw profile summed by stage, per process."""
  cells: Dict[Tuple[Optional[int], str], int]  # (pid, stage) -> samples
  detail: Dict[str, Dict[str, int]]            # stage -> {what decided: samples}
  commands: Dict[Optional[int], str]           # pid -> command line
  harness: int = 0                             # samples of the wrapper, left out

  @property
  def stages(self) -> Dict[str, int]:
    found: Dict[str, int] = collections.Counter()
    for (_, stage), n in self.cells.items():
      found[stage] += n
    return dict(found)

  @property
  def processes(self) -> Dict[Optional[int], int]:
    """pid -> samples."""
    found: Dict[Optional[int], int] = collections.Counter()
    for (pid, _), n in self.cells.items():
      found[pid] += n
    return dict(found)

  @property
  def samples(self) -> int:
    return sum(self.cells.values())


def summarize(lines: Iterable[str], harness_pids: Iterable[int] = ()) -> Profile:
  """Sum py-spy's raw lines by process and stage; samples of the wrapper's process
  (harness_pids, and any process with a WRAPPER frame) are left out."""
  parsed = [parse_line(line) for line in lines if line.strip()]
  skip = set(harness_pids) | {pid for pid, _, frames, _ in parsed
                              if pid is not None and any(WRAPPER in f for f in frames)}
  cells: Dict[Tuple[Optional[int], str], int] = collections.Counter()
  detail: Dict[str, Dict[str, int]] = collections.defaultdict(collections.Counter)
  commands: Dict[Optional[int], str] = {}
  harness = 0
  for pid, cmd, frames, count in parsed:
    if pid in skip or any(WRAPPER in f for f in frames):
      harness += count
      continue
    stage, what = classify(frames, cmd)
    cells[(pid, stage)] += count
    detail[stage][what] += count
    commands[pid] = commands.get(pid) or cmd
  return Profile(dict(cells), {k: dict(v) for k, v in detail.items()}, commands, harness)


def stage_seconds(profile: Profile, cpu_s: float,
                  process_cpu: Optional[Dict[int, float]] = None) -> Dict[str, float]:
  """CPU seconds of each stage, adding up to cpu_s (the tree's).

  Without process_cpu: a stage's share of all samples x cpu_s. With process_cpu ({pid: CPU
  seconds}, psutil's samples of each process): per process, the stage's share of that
  process's samples x its CPU seconds, then all scaled to add up to cpu_s. py-spy counts a
  thread that is running or ready to run, so when the tree has more runnable threads than
  free cores (writer processes beside each other and the profiler), a sample there stands
  for less CPU; each process's own CPU time corrects that between processes. A process with
  samples but no CPU figure (too short-lived for psutil) gets what the others leave of cpu_s
  (or their average per sample)."""
  per_process = profile.processes
  total = sum(per_process.values())
  if not total:
    return {}
  weight: Dict[Optional[int], float] = {}
  known = {pid: process_cpu[pid] for pid in per_process
           if process_cpu and process_cpu.get(pid, 0) > 0}
  if known:
    weight = {pid: cpu / per_process[pid] for pid, cpu in known.items()}
    unknown = sum(n for pid, n in per_process.items() if pid not in known)
    rest = cpu_s - sum(known.values())
    fallback = (rest / unknown if unknown and rest > 0 else
                sum(known.values()) / sum(per_process[pid] for pid in known))
  else:
    fallback = cpu_s / total
  seconds: Dict[str, float] = collections.Counter()
  for (pid, stage), n in profile.cells.items():
    seconds[stage] += n * weight.get(pid, fallback)
  scale = cpu_s / sum(seconds.values()) if sum(seconds.values()) else 0.0
  return {stage: s * scale for stage, s in seconds.items()}


def per_image(profile: Profile, cpu_s: Optional[float], images: Optional[int],
              process_cpu: Optional[Dict[int, float]] = None) -> List[Dict]:
  """Rows in STAGES order (stages without samples left out): samples, share (of the CPU
  seconds; of the samples without cpu_s), and microseconds of CPU per image =
  stage seconds (stage_seconds) / images x 1e6 (None without cpu_s and images)."""
  stages = profile.stages
  total = profile.samples
  timed = cpu_s is not None and bool(images)
  seconds = stage_seconds(profile, cpu_s, process_cpu) if timed else {}
  rows = []
  for stage in STAGES:
    samples = stages.get(stage, 0)
    if not samples:
      continue
    rows.append({"stage": stage, "samples": samples,
                 "share": seconds[stage] / cpu_s if timed and cpu_s else samples / total,
                 "cpu_s": seconds.get(stage),
                 "us_per_image": seconds[stage] / images * 1e6 if timed else None})
  return rows


def print_table(rows: List[Dict], report: Dict) -> None:
  with_us = any(r["us_per_image"] is not None for r in rows)
  print(f"\n{'stage':<34} {'samples':>8} {'share':>7}" + (f" {'us CPU/image':>13}"
                                                             if with_us else ""))
  for r in rows:
    line = f"{r['stage']:<34} {r['samples']:8d} {r['share']:7.1%}"
    if with_us:
      line += f" {r['us_per_image']:13.1f}"
    print(line)
  total = sum(r["samples"] for r in rows)
  line = f"{'total':<34} {total:8d} {1:7.1%}"
  if with_us:
    line += f" {sum(r['us_per_image'] for r in rows):13.1f}"
  print(line)
  if with_us:
    how = ("each process's samples weighted by its own CPU seconds, "
           if report.get("process_cpu") else "")
    print(f"us CPU/image = the stage's share of {report['cpu_s']:.2f} CPU s (the conversion's "
          f"tree, user+sys; {how}share = of those seconds) / {report['images']:,} images "
          "x 1e6")
  else:
    print("no CPU seconds or image count for this profile (no report beside it): shares only")


def print_detail(profile: Profile, top: int) -> None:
  for stage in STAGES:
    found = profile.detail.get(stage)
    if not found:
      continue
    print(f"\n{stage}:")
    for what, n in sorted(found.items(), key=lambda kv: -kv[1])[:top]:
      print(f"  {n:7d}  {what}")


def markdown(rows: List[Dict], report: Dict) -> str:
  """The table for docs/performance.md, after the machine and how it was made."""
  import machine
  lines = [f"Machine (`lscpu`): {machine.summary(report['machine'])}.", ""]
  made = (f"`{report['command']}` on {report['started']}"
          + (f" (commit {report['git'][:7]}"
             + (", with uncommitted changes" if report.get("uncommitted") else "") + ")"
             if report.get("git") else "")
          + f": one conversion of {report['images']:,} {report['dataset']} under py-spy "
          f"({report['rate']} samples/s{', nonblocking' if report['nonblocking'] else ''}), "
          f"{report['samples']:,} samples; {report['cpu_s']:.2f} s of CPU (user+sys of the "
          f"conversion's process tree, the profiler's own not included), {report['wall_s']:.2f} s "
          f"wall; load average {report['load_start']:.1f}-{report['load_end']:.1f}, other work "
          f"{report['other_cores']:.2f} cores")
  if report["disturbed"]:
    made += (f" — **disturbed** (more than {report['max_other_cores']} cores of other work: "
             "these figures say as much about the neighbours as about the code)")
  lines += [made + ".", "",
            "| stage | µs CPU / image | share | samples |",
            "| --- | ---: | ---: | ---: |"]
  for r in rows:
    lines.append(f"| {r['stage']} | {r['us_per_image']:.1f} | {r['share']:.1%} | "
                 f"{r['samples']:,} |")
  lines.append(f"| total | {sum(r['us_per_image'] for r in rows):.1f} | 100% | "
               f"{sum(r['samples'] for r in rows):,} |")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Running the conversion under py-spy


def _wrapper_main(argv: List[str]) -> int:
  """Between py-spy and the conversion: run it and write to argv[0] (JSON) its tree's CPU
  seconds as run.measure takes them (getrusage of the waited-for children: user+sys; psutil's
  samples of each process, which also see those not waited for), each process's CPU seconds,
  and this process's pid (its samples are left out)."""
  import run as harness
  out, cmd = argv[0], argv[1:]
  start = time.perf_counter()
  proc = subprocess.Popen(cmd)
  sampler = harness.TreeSampler(proc.pid, float("inf"))  # run.measure outside kills
  sampler.start()
  code = proc.wait()
  wall = time.perf_counter() - start
  sampler.stopped.set()
  sampler.join()
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  process_cpu: Dict[int, float] = collections.Counter()
  for (pid, _), seconds in sampler.cpu.items():
    process_cpu[pid] += seconds
  with open(out, "w") as f:
    json.dump({"cpu_rusage_s": usage.ru_utime + usage.ru_stime, "returncode": code,
               "wall_s": wall, "pid": os.getpid(), "process_cpu": process_cpu}, f)
  return code


def py_spy() -> Optional[str]:
  found = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
  return found if os.path.exists(found) else None


def profile_run(cmd: List[str], raw: str, rate: int, nonblocking: bool, log_path: str,
                max_rss_mb: float) -> Dict:
  """Run cmd under py-spy (through the wrapper), measured by run.measure (its load figures:
  the profiler's CPU counts as the run's own, not as other load). Returns the conversion's
  cpu_s (the larger of getrusage and psutil's samples, as run.measure), process_cpu, wall_s,
  the profiler's CPU, returncode, wrapper_pid and the load figures."""
  import run as harness
  rusage_json = raw + ".rusage.json"
  spy = [py_spy(), "record", "--subprocesses", "-r", str(rate), "-f", "raw", "-o", raw]
  if nonblocking:
    spy.append("--nonblocking")
  spy += ["--", sys.executable, os.path.abspath(__file__), "--wrapper", rusage_json, "--", *cmd]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
      filter(None, [REPO, os.environ.get("PYTHONPATH")])))
  os.sync()  # the last run's dirty pages written now, not during this one (run.run_once)
  outer = harness.measure(spy, log_path, env, max_rss_mb, cwd=REPO)
  try:
    with open(rusage_json) as f:
      inner = json.load(f)
    os.remove(rusage_json)
  except (OSError, ValueError):  # py-spy did not run the wrapper
    inner = {"cpu_rusage_s": 0.0, "returncode": None, "wall_s": outer.wall_s, "pid": None,
             "process_cpu": {}}
  sampled = sum(inner["process_cpu"].values())
  cpu = max(inner["cpu_rusage_s"], sampled)
  return {"cpu_s": cpu, "cpu_rusage_s": inner["cpu_rusage_s"], "cpu_sampled_s": sampled,
          "process_cpu": inner["process_cpu"], "wall_s": inner["wall_s"],
          "profiler_cpu_s": max(0.0, outer.cpu_s - cpu), "returncode": inner["returncode"],
          "py_spy_returncode": outer.returncode, "killed": outer.error.startswith("killed"),
          "wrapper_pid": inner["pid"], "load_start": outer.load_avg,
          "load_end": outer.load_end, "other_cores": outer.other_cores,
          "harness_cpu_s": outer.harness_cpu_s, "peak_rss_mb": outer.peak_rss_mb}


def _report_rows(raw: str, report: Dict) -> Tuple[Profile, List[Dict]]:
  with open(raw) as f:
    profile = summarize(f, [report["wrapper_pid"]] if report.get("wrapper_pid") else [])
  process_cpu = {int(pid): s for pid, s in (report.get("process_cpu") or {}).items()}
  return profile, per_image(profile, report.get("cpu_s"), report.get("images"), process_cpu)


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:1] == ["--wrapper"]:  # --wrapper OUT.json -- CMD...: see profile_run
    return _wrapper_main([argv[1], *argv[3:]])
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  which = parser.add_mutually_exclusive_group()
  which.add_argument("--images", type=int, metavar="N",
                     help="the cached ~90 KB JPEG set of N images (dataset.py; default 2000)")
  which.add_argument("--small-images", type=int, metavar="N",
                     help="the N-image set of 64x48 JPEGs with 2 boxes each (small_dataset.py)")
  which.add_argument("--raw", metavar="FILE",
                     help="summarise this py-spy raw profile instead of running (with the "
                     "report written beside it, FILE minus .txt plus .json, if there is one)")
  parser.add_argument("--beam-args", default="", metavar="ARGS",
                      help="options added to the conversion's command line, one quoted string "
                      "(Beam's, e.g. \"--direct_running_mode=multi_processing "
                      "--direct_num_workers=2\", or the tool's, e.g. \"--num-shards 256\")")
  parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second "
                      "(default 100)")
  parser.add_argument("--blocking", action="store_true",
                      help="let py-spy pause the processes for each sample (default: "
                      "--nonblocking, which disturbs the run less; a torn stack is rare)")
  parser.add_argument("--json", metavar="OUT", help="also write the report (JSON) here")
  parser.add_argument("--markdown", action="store_true",
                      help="also print the table for docs/performance.md, with the machine "
                      "(lscpu), the command and the load")
  parser.add_argument("--detail", type=int, default=0, metavar="K",
                      help="also print each stage's K largest frames (what decided the stage)")
  parser.add_argument("--unmapped", action="store_true",
                      help="list beam_tfrecord frames that no FRAME_STAGES entry matches")
  parser.add_argument("--max-other-cores", type=float, default=None, metavar="CORES",
                      help="more other work than this during the run marks it disturbed "
                      "(default machine.MAX_OTHER_CORES)")
  parser.add_argument("--max-rss-mb", type=float, default=8000,
                      help="kill the run if its process tree passes this RSS (default 8000)")
  parser.add_argument("--cache-dir", default=os.path.join(HERE, ".cache"),
                      help="dataset cache (default benchmarks/.cache)")
  from run import _attach_beam_args
  args = parser.parse_args(_attach_beam_args(argv))
  import machine
  max_other = machine.MAX_OTHER_CORES if args.max_other_cores is None else args.max_other_cores

  if args.raw:
    raw = args.raw
    beside = re.sub(r"\.txt$", "", raw) + ".json"
    report: Dict = {}
    if os.path.exists(beside):
      with open(beside) as f:
        report = json.load(f)
  else:
    if py_spy() is None:
      parser.error("py-spy not found: pip install -r benchmarks/requirements.txt")
    if args.images is not None and args.images < 1 or \
        args.small_images is not None and args.small_images < 1:
      parser.error("--images and --small-images take N >= 1")
    if args.small_images:
      import small_dataset
      data = small_dataset.ensure_small_dataset(args.small_images, args.cache_dir)
      kind = "64x48 JPEGs (2 boxes each)"
    else:
      import dataset as datasets
      data = datasets.ensure_dataset(args.images or 2000, args.cache_dir)
      kind = f"~{data.total_bytes / data.count / 1e3:.0f} KB JPEGs"
    started = datetime.datetime.now()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    os.makedirs(RESULTS, exist_ok=True)
    raw = os.path.join(RESULTS, f"stages-{stamp}.txt")
    beside = os.path.join(RESULTS, f"stages-{stamp}.json")
    out = os.path.join(args.cache_dir, "runs", f"stages-{stamp}")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd = [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
           "--input", f"train={data.annotations}", "--images", data.images_dir,
           "--output", out, *shlex.split(args.beam_args)]
    print(f"profiling {data.count:,} {kind} ({data.total_bytes / 1e6:.1f} MB) under py-spy, "
          f"{args.rate} samples/s; load average {os.getloadavg()[0]:.2f}", flush=True)
    figures = profile_run(cmd, raw, args.rate, not args.blocking, raw + ".log", args.max_rss_mb)
    import run as harness
    try:
      records, _ = harness.inspect_output(out)
    except OSError:
      records = 0
    shutil.rmtree(out, ignore_errors=True)
    report = {"created": stamp, "started": started.strftime("%Y-%m-%d %H:%M"),
              "command": shlex.join(["benchmarks/stages.py", *argv]),
              "conversion": shlex.join(cmd), "images": data.count, "dataset": kind,
              "image_bytes": data.total_bytes, "rate": args.rate,
              "nonblocking": not args.blocking, "raw": raw, "log": raw + ".log",
              "machine": machine.describe(), "max_other_cores": max_other,
              "disturbed": machine.disturbed(figures["other_cores"], max_other),
              "records": records, **figures}
    report["code"] = harness.code_fingerprint()  # beam_tfrecord/*.py, as run.py records it
    try:
      report["git"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, text=True,
                                     capture_output=True).stdout.strip()
      # changed or new files of the library beside that commit (read-only: no optional lock)
      report["uncommitted"] = bool("".join(subprocess.run(
          git, cwd=REPO, text=True, capture_output=True,
          env=dict(os.environ, GIT_OPTIONAL_LOCKS="0")).stdout.strip() for git in (
              ["git", "diff", "--name-only", "HEAD", "--", "beam_tfrecord"],
              ["git", "ls-files", "--others", "--exclude-standard", "--", "beam_tfrecord"])))
    except OSError:
      pass
    failed = (figures["returncode"] != 0 or figures["killed"] or records != data.count)
    if figures["returncode"] is None:
      print(f"py-spy did not run the conversion (exit {figures['py_spy_returncode']}; it needs "
            f"ptrace rights): see {raw}.log", file=sys.stderr)
    if failed:
      print(f"the conversion FAILED (exit {figures['returncode']}, {records} of {data.count} "
            f"records{', killed: --max-rss-mb' if figures['killed'] else ''}); log: "
            f"{raw}.log", file=sys.stderr)
      report["failed"] = True

  profile, rows = _report_rows(raw, report)
  if not profile.samples:
    print(f"no samples in {raw}", file=sys.stderr)
    return 1
  report.update({"samples": profile.samples, "harness_samples": profile.harness,
                 "stages": rows, "detail": profile.detail,
                 "processes": {str(pid): {"cmd": profile.commands.get(pid, ""), "samples": n}
                               for pid, n in profile.processes.items()}})
  if report.get("cpu_s") is not None:
    print(f"\n{report['images']:,} images: {report['cpu_s']:.2f} s CPU (conversion tree), "
          f"{report['wall_s']:.2f} s wall, profiler {report['profiler_cpu_s']:.2f} s CPU; "
          f"load average {report['load_start']:.2f}-{report['load_end']:.2f}, other work "
          f"{report['other_cores']:.2f} cores"
          + (" — DISTURBED: profile again on a quieter machine" if report["disturbed"] else ""))
  print_table(rows, report)
  if args.detail:
    print_detail(profile, args.detail)
  if args.unmapped:
    found = {w: n for w, n in profile.detail.get(OTHER, {}).items()
             if w.startswith(("unmapped: ", "helper called by Beam: "))}
    print("\nbeam_tfrecord frames without a stage:" if found else
          "\nevery beam_tfrecord frame has a stage")
    for what, n in sorted(found.items(), key=lambda kv: -kv[1]):
      print(f"  {n:7d}  {what}")
  if not args.raw:
    with open(beside, "w") as f:
      json.dump(report, f, indent=2)
  if args.json:
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
      json.dump(report, f, indent=2)
  if args.markdown:
    if report.get("cpu_s") is None:
      print("\n--markdown needs the run's report (CPU seconds, images, machine) beside the "
            "raw profile", file=sys.stderr)
    else:
      print("\n" + markdown(rows, report))
  print(f"\nraw profile: {raw}" + ("" if args.raw else f"\nreport: {beside}"))
  return 1 if report.get("failed") else 0


if __name__ == "__main__":
  sys.path.insert(0, HERE)
  sys.exit(main())

"""Throughput and memory benchmark of beam-tfrecord against naive baselines.

Every variant runs as its own process (start-up and imports included) on the same cached
synthetic COCO dataset (dataset.py). While it runs, the whole process tree is sampled with
psutil every 50 ms (summed RSS of the process and all its descendants); CPU seconds are the
tree's user+sys. Runs are interleaved (variant A, B, C, A, B, C, ...) so that noise from
other load spreads over all variants. Around each run, machine.Load records the load average
at its start and end and the other cores busy meanwhile (/proc/stat); a run beside more than
--max-other-cores of other work is disturbed: re-run (--retries) in the same round, and never
counted. Each row gives the medians of its counted runs with their spread (min-max); a row
with no counted run is refused ("disturbed: not reported"). Ratios are to the official
converter's row of the same sitting, or not given. --markdown prints the table for the docs,
with the machine (lscpu) and the load.

  python benchmarks/run.py --images 2000 --repeats 3
  python benchmarks/run.py --variants tool --beam-args "--direct_running_mode=multi_threading"
      --beam-args "--direct_running_mode=multi_processing --direct_num_workers=2"
  python benchmarks/run.py --scale --images 2000
  python benchmarks/run.py --small-images 200000,1000000 --repeats 1
  python benchmarks/run.py --markdown-from benchmarks/results/STAMP.json
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import dataset as datasets  # noqa: E402  (benchmarks/ is not a package)
import machine  # noqa: E402
import official_converter  # noqa: E402
import small_dataset  # noqa: E402

RESULTS = os.path.join(HERE, "results")
SAMPLE_SECONDS = 0.05
MB = 1e6  # throughput and memory are reported in MB = 10^6 bytes


@dataclasses.dataclass
class Variant:
  name: str
  label: str
  kind: str                     # tool | naive | official
  args: List[str]               # extra CLI args (tool) or the naive.py mode
  repo: str = REPO              # tool: the source tree on PYTHONPATH (--tree compares versions)
  own_shards: bool = False      # sharded its own way: its bytes are not compared with the rows'

  @property
  def slug(self) -> str:
    """The name made safe for file names (no spaces, no glob characters like [ ])."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.name).strip("_")

  @property
  def shard_sink(self) -> bool:
    """beam-tfrecord with its own shard writer (deterministic output)."""
    return (self.kind == "tool" and "beam" not in self.args and "--sink=beam" not in self.args
            and not self.own_shards)


BUILTIN = {
    "tool": Variant("tool", "(1) beam-tfrecord, DirectRunner defaults", "tool", []),
    "beam-sink": Variant("beam-sink", "(2) beam-tfrecord --sink beam", "tool", ["--sink", "beam"]),
    "naive": Variant("naive", "(3) naive TF loop, decode_jpeg", "naive", ["decode"]),
    "naive-nodecode": Variant("naive-nodecode", "(4) naive TF loop, no decode", "naive",
                              ["nodecode"]),
    "read": Variant("read", "(5) I/O floor: read each file", "naive", ["read"]),
    "official": Variant("official", "(6) official/vision create_coco_tf_record, 1 process",
                        "official", []),
    # issue 41: ArrayRecord shards of the same records (its digest compares with (1)'s)
    "tool-array-record": Variant("tool-array-record", "(1) --file-format array_record", "tool",
                                 ["--file-format", "array_record"]),
    "tool-mp": Variant("tool-mp", "(1) multi_processing, 2 workers", "tool",
                       ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]),
    # --small-images: every option at its default (shards by --shard-size-mb), the row the
    # scale issue's local memory target is defined on
    "tool-default": Variant("tool-default", "(1) defaults, shards by size", "tool", [],
                            own_shards=True),
}
DEFAULT_VARIANTS = ("tool", "beam-sink", "naive", "naive-nodecode", "read", "official")
# --small-images: the scale issue's rows and shard count (every tool row gets SMALL_ARGS, so
# their shard bytes are comparable)
SMALL_VARIANTS = ("tool", "tool-default", "tool-mp", "official")
SMALL_ARGS = ["--num-shards", "256"]


@dataclasses.dataclass
class Run:
  """One measured process tree."""
  wall_s: float
  cpu_s: float
  peak_rss_mb: float
  processes: int                # distinct processes seen in the tree
  returncode: int
  records: Optional[int] = None  # TFRecord records in the output (None: writes none)
  digest: Optional[str] = None   # sha256 over the output's .tfrecord files (names + bytes)
  error: str = ""                # why the run does not count ("" when it does)
  load_avg: float = 0.0          # 1-minute load average when it started
  code: str = ""                 # fingerprint of beam_tfrecord/ sources when it started
  log: str = ""
  peak_proc_rss_mb: float = 0.0  # the largest RSS of any single process in the tree
  load_end: float = 0.0          # 1-minute load average when it ended
  other_cores: float = 0.0       # cores busy with other work meanwhile (machine.Load)
  harness_cpu_s: float = 0.0     # this process's own CPU meanwhile (the sampler)
  disturbed: bool = False        # other_cores above --max-other-cores: not counted
  round: int = 0                 # which of the --repeats rounds
  attempt: int = 0               # 0, then 1.. for the re-runs of a disturbed run

  @property
  def ok(self) -> bool:
    return not self.error


class TreeSampler(threading.Thread):
  """Samples RSS and CPU times of a process and all its descendants until stopped.

  Kills the tree (by pid) if its RSS passes limit_bytes: the machine is shared.
  """

  def __init__(self, pid: int, limit_bytes: float):
    super().__init__(daemon=True)
    self.root = psutil.Process(pid)
    self.limit = limit_bytes
    self.killed = False
    self.peak_rss = 0
    self.peak_proc_rss = 0  # one process's: a worker near its limit hides in a small tree sum
    self.cpu: Dict[tuple, float] = {}   # (pid, create_time) -> last seen user+sys
    self.stopped = threading.Event()

  def sample(self) -> None:
    try:
      procs = [self.root] + self.root.children(recursive=True)
    except psutil.Error:
      return
    rss = 0
    for proc in procs:
      try:
        with proc.oneshot():
          one = proc.memory_info().rss
          rss += one
          self.peak_proc_rss = max(self.peak_proc_rss, one)
          times = proc.cpu_times()
          self.cpu[(proc.pid, proc.create_time())] = times.user + times.system
      except psutil.Error:  # exited between listing and reading
        pass
    self.peak_rss = max(self.peak_rss, rss)
    if rss > self.limit and not self.killed:
      self.killed = True
      for proc in reversed(procs):
        try:
          proc.kill()
        except psutil.Error:
          pass

  def run(self) -> None:
    while not self.stopped.is_set():
      self.sample()
      self.stopped.wait(SAMPLE_SECONDS)


def code_fingerprint(repo: str = REPO) -> str:
  """Short hash of the library's sources: tells runs of different code apart (the library may
  be edited while a long benchmark runs)."""
  digest = hashlib.sha256()
  package = os.path.join(repo, "beam_tfrecord")
  for folder, dirs, files in sorted(os.walk(package)):
    dirs.sort()
    for name in sorted(f for f in files if f.endswith(".py")):
      path = os.path.join(folder, name)
      digest.update(os.path.relpath(path, package).encode() + b"\0")
      with open(path, "rb") as f:
        digest.update(f.read())
  return digest.hexdigest()[:12]


def measure(cmd: Sequence[str], log_path: str, env: Dict[str, str], max_rss_mb: float,
            cwd: str = REPO) -> Run:
  """Run cmd to completion in `cwd`; wall time, tree CPU time, peak tree RSS, and the
  machine's other load meanwhile (not judged here: see schedule)."""
  load = machine.Load().start()
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  with open(log_path, "wb") as log:
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
  sampler = TreeSampler(proc.pid, max_rss_mb * MB)
  sampler.start()
  proc.wait()
  wall = time.perf_counter() - start
  load.stop()
  sampler.stopped.set()
  sampler.join()
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  # getrusage counts every descendant that was waited for; the samples also catch any that
  # were not (orphaned workers), up to the last 50 ms of each. Take the larger.
  rusage_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  cpu = max(rusage_cpu, sum(sampler.cpu.values()))
  figures = load.figures(cpu, wall)
  return Run(wall_s=wall, cpu_s=cpu, peak_rss_mb=sampler.peak_rss / MB,
             peak_proc_rss_mb=sampler.peak_proc_rss / MB,
             processes=len(sampler.cpu), returncode=proc.returncode,
             load_avg=figures["load_start"], load_end=figures["load_end"],
             other_cores=figures["other_cores"], harness_cpu_s=figures["harness_cpu_s"],
             error=(f"killed: tree RSS passed --max-rss-mb {max_rss_mb:.0f}" if sampler.killed
                    else f"exit code {proc.returncode}" if proc.returncode else ""),
             log=log_path)


def count_records(path: str) -> int:
  """Records in a TFRecord file, by walking its length headers (no CRC check)."""
  count = 0
  with open(path, "rb") as f:
    while True:
      header = f.read(12)
      if not header:
        return count
      (length,) = struct.unpack("<Q", header[:8])
      f.seek(length + 4, os.SEEK_CUR)
      count += 1


def inspect_output(directory: str) -> tuple[int, str]:
  """(records, digest) of every .tfrecord file in directory, in name order. An ArrayRecord
  file (--file-format array_record) counts as the TFRecord file of the same records: its
  records framed as TFRecord frames them, under the .tfrecord name, so that the row's digest
  equals a TFRecord row's when the records are the same."""
  digest, records = hashlib.sha256(), 0
  names = {n: n for n in os.listdir(directory) if n.endswith(".tfrecord")}
  names.update({n[:-len(".array_record")] + ".tfrecord": n for n in os.listdir(directory)
                if n.endswith(".array_record")})
  for name, found in sorted(names.items()):
    path = os.path.join(directory, found)
    digest.update(name.encode() + b"\0")
    if found != name:
      from beam_tfrecord.records.tfrecord import framing
      from beam_tfrecord.storage import record_files
      for record in record_files.read_records(path, record_files.ARRAY_RECORD):
        head, tail = framing(record)
        digest.update(head + record + tail)
        records += 1
      continue
    records += count_records(path)
    with open(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
  return records, digest.hexdigest()


def command(variant: Variant, data: datasets.Dataset, out: str,
            cache_dir: str = datasets.DEFAULT_CACHE) -> List[str]:
  if variant.kind == "official":
    return [official_converter.venv_python(cache_dir), official_converter.__file__, "run",
            f"--image_dir={data.images_dir}", f"--object_annotations_file={data.annotations}",
            f"--output_file_prefix={os.path.join(out, 'train')}", "--num_shards=8",
            "--num_processes=0"]
  if variant.kind == "tool":
    return [sys.executable, "-m", "beam_tfrecord.cli", "convert", "--format", "coco",
            "--input", f"train={data.annotations}", "--images", data.images_dir,
            "--output", out, *variant.args]
  cmd = [sys.executable, os.path.join(HERE, "naive.py"), *variant.args,
         "--annotations", data.annotations, "--images", data.images_dir]
  if variant.args != ["read"]:
    cmd += ["--output", os.path.join(out, "naive.tfrecord")]
  return cmd


def run_once(variant: Variant, data: datasets.Dataset, work: str, logs: str, tag: str,
             keep: bool, max_rss_mb: float) -> Run:
  out = os.path.join(work, f"{variant.slug}-{data.count}")
  shutil.rmtree(out, ignore_errors=True)
  os.makedirs(out)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
      filter(None, [variant.repo, os.environ.get("PYTHONPATH")])))
  log = os.path.join(logs, f"{variant.slug}-{data.count}-{tag}.log")
  code = code_fingerprint(variant.repo)
  # every run writes the dataset again: flush the last one's dirty pages first (untimed), or
  # their writeback lands in this run's time (20,000 images: one run took 17.6 s, the
  # next 8.5 s and 6.3 s, with nothing else running)
  os.sync()
  # in the variant's tree: `python -m` puts the working directory first on sys.path, ahead of
  # PYTHONPATH, so a --tree row run from this checkout would import this checkout's code
  result = measure(command(variant, data, out, data.root), log, env, max_rss_mb,
                   cwd=variant.repo)
  result.code = code
  if variant.args != ["read"] and result.ok:
    result.records, result.digest = inspect_output(out)
    if result.records != data.count:
      result.error = f"{result.records} records written, expected {data.count}"
  if not keep:
    shutil.rmtree(out, ignore_errors=True)
  return result


def schedule(variants: List[Variant], repeats: int, retries: int, max_other_cores: float,
             run_one: Callable[[Variant, str], Run]) -> Dict[str, List[Run]]:
  """Every variant once per round, interleaved, `repeats` rounds. A successful run beside more
  than max_other_cores of other work is disturbed: within its round, the disturbed variants
  run again, in order, up to `retries` times. Every attempt is kept (the report shows them);
  only undisturbed successful runs count (summarize)."""
  runs: Dict[str, List[Run]] = {v.name: [] for v in variants}
  for rep in range(repeats):
    pending = list(variants)
    for attempt in range(retries + 1):
      again = []
      for variant in pending:
        run = run_one(variant, f"r{rep}" + (f"-retry{attempt}" if attempt else ""))
        run.round, run.attempt = rep, attempt
        run.disturbed = run.ok and machine.disturbed(run.other_cores, max_other_cores)
        runs[variant.name].append(run)
        if run.disturbed:
          again.append(variant)
        status = ("ok" if run.ok and not run.disturbed
                  else f"DISTURBED ({'re-run' if attempt < retries else 'no retries left'})"
                  if run.ok else f"FAILED: {run.error} (log: {run.log})")
        tag = f"[{rep + 1}/{repeats}{f' retry {attempt}' if attempt else ''}]"
        print(f"  {tag:<15} {variant.name:<16} {run.wall_s:7.2f} s {run.peak_rss_mb:6.0f} MB "
              f"{run.cpu_s:7.2f} cpu-s  load {run.load_avg:4.2f}-{run.load_end:4.2f}  other "
              f"{run.other_cores:4.2f} cores  {status}", flush=True)
      pending = again
      if not pending:
        break
  return runs


def measure_all(variants: List[Variant], data: datasets.Dataset, repeats: int, work: str,
                logs: str, keep: bool, max_rss_mb: float, retries: int = 0,
                max_other_cores: float = machine.MAX_OTHER_CORES) -> Dict[str, List[Run]]:
  return schedule(variants, repeats, retries, max_other_cores,
                  lambda variant, tag: run_once(variant, data, work, logs, tag, keep, max_rss_mb))


def spread(values: List[float]) -> Dict[str, float]:
  return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: List[Run], count: int, total_bytes: int, sitting: str) -> Dict:
  """A row: medians and spread (min-max) over its counted runs (successful, undisturbed).

  status: "ok"; "disturbed" when every successful run stayed disturbed; "failed" when no run
  succeeded. Then "median" is None: the row is refused, never mixed with counted rows."""
  ok = [r for r in runs if r.ok]
  counted = [r for r in ok if not r.disturbed]
  summary: Dict = {"status": "ok" if counted else "disturbed" if ok else "failed",
                   "sitting": sitting, "attempts": len(runs), "counted": len(counted),
                   "failed_runs": len(runs) - len(ok), "disturbed_runs": len(ok) - len(counted),
                   "other_cores_all": [round(r.other_cores, 3) for r in runs], "median": None}
  if not counted:
    return summary
  wall, cpu = spread([r.wall_s for r in counted]), spread([r.cpu_s for r in counted])
  summary["median"] = {
      "wall_s": wall["median"], "wall_min_s": wall["min"], "wall_max_s": wall["max"],
      "cpu_s": cpu["median"], "cpu_min_s": cpu["min"], "cpu_max_s": cpu["max"],
      "images_per_s": count / wall["median"], "mb_per_s": total_bytes / MB / wall["median"],
      "cpu_ms_per_image": cpu["median"] * 1000 / count,
      "peak_rss_mb": statistics.median(r.peak_rss_mb for r in counted),
      "peak_proc_rss_mb": statistics.median(r.peak_proc_rss_mb for r in counted),
      "processes": max(r.processes for r in counted),
      "load_min": min(min(r.load_avg, r.load_end) for r in counted),
      "load_max": max(max(r.load_avg, r.load_end) for r in counted),
      "other_cores_max": max(r.other_cores for r in counted)}
  return summary


BASE = "official"  # the ratios' reference row


def ratios(summaries: Dict[str, Dict], base: str = BASE) -> Optional[Dict[str, Optional[Dict]]]:
  """Wall and CPU of each row over the official converter's, for the rows measured in the
  same sitting as it (one invocation). None (no ratio column) when that row was not measured
  or was refused; a row of another sitting, or refused, gets None."""
  ref = summaries.get(base)
  if not ref or ref["median"] is None:
    return None
  result: Dict[str, Optional[Dict]] = {}
  for name, s in summaries.items():
    m = s["median"]
    result[name] = (None if m is None or s["sitting"] != ref["sitting"] else
                    {"wall_x": m["wall_s"] / ref["median"]["wall_s"],
                     "cpu_x": m["cpu_s"] / ref["median"]["cpu_s"]})
  return result


def table_rows(report: Dict) -> List[Dict]:
  """One row per variant and size of a report: label, N, summary, ratio (None: not given)."""
  rows = []
  for n, size in report["sizes"].items():
    found = ratios(size["variants"])
    for name, entry in size["variants"].items():
      rows.append({"label": entry["label"], "n": int(n), "summary": entry,
                   "ratio": found.get(name) if found else None, "has_ratio": bool(found)})
  return rows


def refusal(summary: Dict) -> str:
  """Why a row gives no figures ("" when it does)."""
  if summary["median"] is not None:
    return ""
  if summary["status"] == "disturbed":
    others = summary["other_cores_all"]
    beside = (f"{others[0]:.2f}" if len(others) == 1 else
              f"{min(others):.2f}-{max(others):.2f}")
    runs = f"{len(others)} run{'s' if len(others) > 1 else ''}"
    return f"disturbed: not reported ({runs} beside {beside} other cores)"
  return f"failed: not reported ({summary['failed_runs']} failed runs)"


def _range(low: float, high: float, digits: int) -> str:
  return f"{low:.{digits}f}-{high:.{digits}f}"


def print_table(rows: List[Dict]) -> None:
  """The terminal table: medians of the counted runs, their spread, the load, the ratios."""
  with_ratio = any(r["has_ratio"] for r in rows)
  width = max(len(r["label"]) for r in rows)
  header = (f"{'variant':<{width}} {'runs':>5} {'wall s':>7} {'wall min-max':>13} {'CPU s':>7} "
            f"{'CPU min-max':>13} {'CPU ms/img':>10} {'img/s':>7} {'MB/s':>6} {'peak MB':>7} "
            f"{'1 proc MB':>9} {'procs':>5} {'load':>9} {'other':>5}")
  if with_ratio:
    header += f"  {'wall x(6)':>9} {'CPU x(6)':>8}"
  print(header)
  for row in rows:
    s, m = row["summary"], row["summary"]["median"]
    line = f"{row['label']:<{width}} {s['counted']:>2}/{s['attempts']:<2}"
    if m is None:
      print(f"{line} {refusal(s)}")
      continue
    line += (f" {m['wall_s']:7.2f} {_range(m['wall_min_s'], m['wall_max_s'], 2):>13} "
             f"{m['cpu_s']:7.2f} {_range(m['cpu_min_s'], m['cpu_max_s'], 2):>13} "
             f"{m['cpu_ms_per_image']:10.3f} {m['images_per_s']:7.1f} {m['mb_per_s']:6.1f} "
             f"{m['peak_rss_mb']:7.0f} {m['peak_proc_rss_mb']:9.0f} {m['processes']:5d} "
             f"{_range(m['load_min'], m['load_max'], 1):>9} {m['other_cores_max']:5.2f}")
    if with_ratio:
      r = row["ratio"]
      line += f"  {r['wall_x']:9.2f} {r['cpu_x']:8.2f}" if r else f"  {'-':>9} {'-':>8}"
    if s["failed_runs"]:
      line += f"  ({s['failed_runs']} FAILED run(s))"
    print(line)
  print("runs = counted/attempted (a disturbed run is re-run, never counted); wall and CPU s = "
        "medians of the counted runs, with their min-max; load = the 1-minute load average "
        "over their starts and ends; other = the most cores other work used during one.")
  if with_ratio:
    print("wall x(6), CPU x(6) = the row's wall / CPU seconds over the official converter's (6), "
          "same sitting: below 1 means the row is faster / uses less CPU.")


def markdown(report: Dict) -> str:
  """The result table as docs/performance.md has them, with the machine and the load."""
  rows = table_rows(report)
  sizes = len(report["sizes"]) > 1
  with_ratio = any(r["has_ratio"] for r in rows)
  counted = [r["summary"]["median"] for r in rows if r["summary"]["median"]]
  lines = [f"Machine (`lscpu`): {machine.summary(report['machine'])}.", ""]
  sitting = (f"`{report['command']}` on {report['started']}"
             + (f" (commit {report['git'][:7]})" if report.get("git") else "")
             + f": medians of {report['repeats']} interleaved run(s) per row, spread min-max")
  if counted:
    sitting += (f"; load average {min(m['load_min'] for m in counted):.1f}-"
                f"{max(m['load_max'] for m in counted):.1f} during the counted runs, other "
                f"work at most {max(m['other_cores_max'] for m in counted):.2f} cores")
  retried = (f"re-run up to {report['retries']} times" if report["retries"] else "not re-run")
  sitting += (f" (a run beside more than {report['max_other_cores']} cores of other work is "
              f"disturbed: {retried}, never counted).")
  lines += [sitting, ""]
  head = ["row"] + (["N"] if sizes else []) + ["runs", "wall s", "CPU s", "CPU ms / image",
                                               "peak MB", "load", "other cores"]
  if with_ratio:
    head += ["wall x (6)", "CPU x (6)"]
  lines += ["| " + " | ".join(head) + " |",
            "| --- | " + " | ".join("---:" for _ in head[1:]) + " |"]
  for row in rows:
    s, m = row["summary"], row["summary"]["median"]
    tried = "" if s["attempts"] == s["counted"] else f" of {s['attempts']}"
    cells = [row["label"]] + ([f"{row['n']:,}"] if sizes else []) + [f"{s['counted']}{tried}"]
    if m is None:
      cells += [refusal(s)] + [""] * (len(head) - len(cells) - 1)
    else:
      cells += [f"{m['wall_s']:.2f} ({_range(m['wall_min_s'], m['wall_max_s'], 2)})",
                f"{m['cpu_s']:.2f} ({_range(m['cpu_min_s'], m['cpu_max_s'], 2)})",
                f"{m['cpu_ms_per_image']:.3f}", f"{m['peak_rss_mb']:,.0f}",
                _range(m["load_min"], m["load_max"], 1), f"{m['other_cores_max']:.2f}"]
      if with_ratio:
        r = row["ratio"]
        cells += [f"{r['wall_x']:.2f}", f"{r['cpu_x']:.2f}"] if r else ["-", "-"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def identity_check(variants: List[Variant], runs: Dict[str, List[Run]]) -> Dict:
  """Are the shard bytes the same across runs and Beam modes of the shard sink?

  Runs are compared within each version of the library code (see code_fingerprint).
  """
  shard_variants = [v.name for v in variants if v.shard_sink]
  by_code: Dict[str, Dict[str, List[str]]] = {}
  for name in shard_variants:
    for r in runs[name]:
      if r.ok:
        by_code.setdefault(r.code, {}).setdefault(name, []).append(r.digest)
  result: Dict = {"variants": shard_variants, "by_code": by_code,
                  "identical": bool(by_code) and all(
                      len({d for ds in v.values() for d in ds}) == 1 for v in by_code.values())}
  every = {d for v in by_code.values() for ds in v.values() for d in ds}
  result["identical_across_versions"] = len(every) == 1
  if len(by_code) > 1:
    print(f"shard bytes identical across all {len(by_code)} code versions (--tree rows and "
          f"edits): {'yes' if len(every) == 1 else 'NO'}")
  if shard_variants:
    note = (f" (library code changed during the benchmark: compared within each of "
            f"{len(by_code)} versions)" if len(by_code) > 1 else "")
    count = sum(len(ds) for v in by_code.values() for ds in v.values())
    print(f"shard bytes identical across {count} successful runs of "
          f"{', '.join(shard_variants)}: {'yes' if result['identical'] else 'NO'}{note}")
  if "beam-sink" in runs:
    beam = {r.digest for r in runs["beam-sink"] if r.ok}
    result["beam_sink_identical_across_runs"] = len(beam) == 1
    print(f"--sink beam output identical across its runs: {'yes' if len(beam) == 1 else 'no'}")
  return result


def _attach_beam_args(argv: Sequence[str]) -> List[str]:
  """`--beam-args "--x=y"` -> `--beam-args=--x=y`: argparse would take "--x=y" for a flag."""
  result, rest = [], list(argv)
  while rest:
    arg = rest.pop(0)
    result.append(f"{arg}={rest.pop(0)}" if arg == "--beam-args" and rest else arg)
  return result


def main(argv: Optional[Sequence[str]] = None, logs_dir: Optional[str] = None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--images", type=int, default=2000, metavar="N",
                      help="dataset size N (default 2000; generated once, cached)")
  parser.add_argument("--repeats", type=int, default=3, help="runs per variant (default 3)")
  parser.add_argument("--variants", metavar="A,B,...",
                      help=f"which rows, comma-separated, from {', '.join(BUILTIN)} "
                      f"(default: all but tool-mp and tool-default; with --small-images: "
                      f"{','.join(SMALL_VARIANTS)}). `official` needs the tf-models-official "
                      "wheel (made into a benchmark-only venv on first use; skipped when "
                      "unavailable)")
  parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                      help="add a row: (1) run from another source tree (e.g. a `git archive` "
                      "of an older commit), to compare versions in one sitting; its shard "
                      "bytes are compared with the others'")
  parser.add_argument("--smoke", action="store_true",
                      help="CI mode: a tiny dataset in a temporary cache, one repeat of (1), "
                      "(4), the gs:// latency check, then --small-images 200 without `official`; "
                      "fails only if a run fails or the output differs, never on timing")
  parser.add_argument("--beam-args", action="append", default=[], metavar="ARGS",
                      help="add a row: variant (1) with these Beam options (one quoted string); "
                      "repeat for several. Shard bytes are compared across all (1) rows")
  parser.add_argument("--scale", action="store_true",
                      help="scale mode: run (1) and the --beam-args rows at N and 4N images and "
                      "report how time and peak memory grow")
  parser.add_argument("--small-images", metavar="N[,N...]",
                      help="small-image scale mode: at each N, a dataset of N 64x48 JPEGs as "
                      "hard links (small_dataset.py; made once, cached), rows "
                      f"{', '.join(SMALL_VARIANTS)}; every (1) row gets {' '.join(SMALL_ARGS)}")
  parser.add_argument("--output-json", metavar="PATH",
                      help="where to write the results (default benchmarks/results/"
                      "<timestamp>.json)")
  parser.add_argument("--cache-dir", default=datasets.DEFAULT_CACHE,
                      help="dataset cache (default benchmarks/.cache)")
  parser.add_argument("--max-rss-mb", type=float, default=8000,
                      help="kill a run whose process tree passes this RSS (default 8000 MB; "
                      "the machine is shared)")
  parser.add_argument("--keep-outputs", action="store_true",
                      help="keep each variant's output in CACHE/runs/ (default: deleted)")
  parser.add_argument("--max-other-cores", type=float, default=machine.MAX_OTHER_CORES,
                      metavar="CORES",
                      help="a run beside more than this many cores of other work (machine-wide "
                      "busy CPU from /proc/stat minus the run's own) is disturbed: re-run, never "
                      f"counted (default {machine.MAX_OTHER_CORES})")
  parser.add_argument("--retries", type=int, default=2,
                      help="re-runs of a disturbed run, in its round (default 2); a row whose "
                      "runs all stay disturbed is not reported")
  parser.add_argument("--markdown", action="store_true",
                      help="also print the result table as markdown for docs/performance.md, "
                      "with the machine (lscpu) and the load")
  parser.add_argument("--markdown-from", metavar="REPORT.json",
                      help="print the markdown table of an earlier report and exit (runs nothing)")
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parser.parse_args(_attach_beam_args(argv))
  if args.markdown_from:
    with open(args.markdown_from) as f:
      earlier = json.load(f)
    if "sitting" not in earlier:
      parser.error(f"{args.markdown_from} predates the load figures (no sitting): run it again")
    print(markdown(earlier))
    return 0
  if args.retries < 0:
    parser.error("--retries must be at least 0")

  smoke_dir = None
  if args.smoke:  # tiny, in a throw-away cache: proves the harness works, times nothing
    import tempfile
    smoke_dir = tempfile.mkdtemp(prefix="beam-tfrecord-bench-smoke-")
    args.images, args.repeats, args.cache_dir, args.retries = 24, 1, smoke_dir, 0
    args.variants, args.small_images = "tool,tool-array-record,naive-nodecode", None  # small last
    args.output_json = args.output_json or os.path.join(smoke_dir, "results.json")
  try:
    small_sizes = [int(n) for n in (args.small_images or "").split(",") if n.strip()]
  except ValueError:
    small_sizes = [0]
  if args.small_images and (args.scale or not small_sizes or min(small_sizes) < 1):
    parser.error("--small-images takes sizes N[,N...] of at least 1, and not --scale")
  args.variants = args.variants or ",".join(SMALL_VARIANTS if small_sizes else DEFAULT_VARIANTS)
  names = [n.strip() for n in args.variants.split(",") if n.strip()]
  unknown = [n for n in names if n not in BUILTIN]
  if unknown:
    parser.error(f"unknown variants {unknown}; choose from {', '.join(BUILTIN)}")
  if args.repeats < 1 or args.images < 1:
    parser.error("--images and --repeats must be at least 1")
  variants = [BUILTIN[n] for n in names]
  if any(v.kind == "official" for v in variants):
    why = official_converter.setup(args.cache_dir)
    if why:
      print(f"skipping row (6), the official converter: {why}")
      variants = [v for v in variants if v.kind != "official"]
  for extra in args.beam_args:
    variants.append(Variant(f"tool[{extra}]", f"(1) {extra}", "tool", shlex.split(extra)))
  for tree in args.tree:
    name, sep, path = tree.partition("=")
    if not sep or not os.path.isdir(os.path.join(path, "beam_tfrecord")):
      parser.error(f"--tree {tree!r}: expected NAME=DIR with DIR/beam_tfrecord")
    variants.append(Variant(f"tool@{name}", f"(1) from {name}", "tool", [],
                            os.path.abspath(path)))
  if args.scale:
    variants = [v for v in variants if v.shard_sink] or [BUILTIN["tool"]]
  if small_sizes:
    variants = [dataclasses.replace(v, args=v.args + SMALL_ARGS,
                                    label=f"{v.label}, {' '.join(SMALL_ARGS)}")
                if v.kind == "tool" and not v.own_shards else v for v in variants]

  started = datetime.datetime.now()
  stamp = started.strftime("%Y%m%d-%H%M%S")
  output_json = args.output_json or os.path.join(RESULTS, f"{stamp}.json")
  logs = os.path.join(logs_dir or smoke_dir or RESULTS, f"{stamp}-logs")
  work = os.path.join(args.cache_dir, "runs")
  os.makedirs(logs, exist_ok=True)
  os.makedirs(work, exist_ok=True)
  sizes = small_sizes or ([args.images, 4 * args.images] if args.scale else [args.images])
  report: Dict = {
      "created": stamp, "images": sizes[0], "repeats": args.repeats,
      "mode": "small-images" if small_sizes else "scale" if args.scale else "rows",
      # one invocation is one sitting: ratios are only taken between rows of the same one
      "sitting": f"{stamp}-{os.getpid()}", "started": started.strftime("%Y-%m-%d %H:%M"),
      "command": shlex.join(["benchmarks/run.py", *argv]),
      "retries": args.retries, "max_other_cores": args.max_other_cores,
      "machine": machine.describe(), "load_avg_at_start": os.getloadavg(),
      "logs": logs, "sizes": {}}
  try:
    report["git"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, text=True,
                                   capture_output=True).stdout.strip()
  except OSError:
    pass

  all_failed: List[str] = []
  for count in sizes:
    data = (small_dataset.ensure_small_dataset if small_sizes
            else datasets.ensure_dataset)(count, args.cache_dir)
    print(f"\nN={count}: {data.total_bytes / MB:.1f} MB of JPEG "
          f"(mean {data.total_bytes / count / 1e3:.1f} KB), {data.boxes} boxes; "
          f"{args.repeats} repeat(s); load average {os.getloadavg()[0]:.2f}", flush=True)
    runs = measure_all(variants, data, args.repeats, work, logs, args.keep_outputs,
                       args.max_rss_mb, args.retries, args.max_other_cores)
    size = report["sizes"][str(count)] = {
        "dataset": dataclasses.asdict(data),
        "variants": {v.name: {"label": v.label, "command": command(v, data, "OUT"),
                              **summarize(runs[v.name], count, data.total_bytes,
                                          report["sitting"]),
                              "runs": [dataclasses.asdict(r) for r in runs[v.name]]}
                     for v in variants}}
    size["ratios_to_official"] = ratios(size["variants"])
    print(f"\nMedians of the counted runs ({args.repeats} round(s)), N={count} images, "
          f"{data.total_bytes / MB:.0f} MB:")
    print_table(table_rows({"sizes": {str(count): size}}))
    identity = size["identity"] = identity_check(variants, runs)
    failed = [v.name for v in variants for r in runs[v.name] if not r.ok]
    if failed:
      print(f"FAILED runs: {', '.join(failed)} (logs in {logs})")
    all_failed += failed
    if not identity.get("identical_across_versions", True) or not identity.get("identical", True):
      all_failed.append("shard bytes differ")

  if args.scale:
    report["scale"] = scale_rows(report)
  report["targets"] = [] if small_sizes else targets(report)  # defined on realistic images
  os.makedirs(os.path.dirname(os.path.abspath(output_json)), exist_ok=True)
  with open(output_json, "w") as f:
    json.dump(report, f, indent=2)
  if args.markdown:
    print("\n" + markdown(report))
  print(f"\nresults: {output_json}\nlogs: {logs}")
  if args.smoke:
    import gcs_latency
    if gcs_latency.main(["--images", "12", "--repeats", "1", "--latency-ms", "5",
                         "--cache-dir", smoke_dir]):
      all_failed.append("gs:// latency benchmark")
    # the small-image mode without its official row (it would download a wheel into this
    # throw-away cache)
    print("\n== smoke: --small-images 200", flush=True)
    if main(["--small-images", "200", "--repeats", "1", "--retries", "0",
             "--variants", "tool,tool-default,tool-mp",
             "--cache-dir", smoke_dir, "--max-rss-mb", str(args.max_rss_mb),
             "--output-json", os.path.join(smoke_dir, "small-results.json")],
            logs_dir=smoke_dir):
      all_failed.append("--small-images")
    if not all_failed:
      shutil.rmtree(smoke_dir, ignore_errors=True)
    print(f"smoke: {'FAILED: ' + ', '.join(all_failed) if all_failed else 'ok'}")
  return 1 if all_failed else 0


def scale_rows(report: Dict) -> List[Dict]:
  """Growth of time and peak memory of each row from N to 4N images."""
  n1, n4 = report["images"], 4 * report["images"]
  small, big = report["sizes"][str(n1)]["variants"], report["sizes"][str(n4)]["variants"]
  rows = []
  for name, entry in small.items():
    a, b = entry["median"], big[name]["median"]
    if a is None or b is None:  # refused at one size: no growth to give
      print(f"scale: {entry['label']}: not reported (" + "; ".join(
          f"{n}: {refusal(e)}" for n, e in ((n1, entry), (n4, big[name])) if refusal(e)) + ")")
      continue
    rows.append({"variant": name, "label": entry["label"], "wall_n": a["wall_s"],
                 "wall_4n": b["wall_s"], "time_ratio": b["wall_s"] / a["wall_s"],
                 "marginal_images_per_s": (n4 - n1) / max(b["wall_s"] - a["wall_s"], 1e-9),
                 "marginal_cpu_ms_per_image": (b["cpu_s"] - a["cpu_s"]) * 1000 / (n4 - n1),
                 "peak_n": a["peak_rss_mb"], "peak_4n": b["peak_rss_mb"],
                 "peak_growth": b["peak_rss_mb"] / a["peak_rss_mb"] - 1})
  if not rows:
    return rows
  print(f"\nScale, medians, N={n1} -> 4N={n4}:")
  width = max(len(r["label"]) for r in rows)
  print(f"{'variant':<{width}} {'wall N':>7} {'wall 4N':>7} {'x':>5} {'marg img/s':>10} "
        f"{'cpu N':>7} {'cpu 4N':>7} {'marg cpu ms/img':>15} {'peak N':>7} {'peak 4N':>7} "
        f"{'growth':>7}")
  for r in rows:
    print(f"{r['label']:<{width}} {r['wall_n']:7.2f} {r['wall_4n']:7.2f} {r['time_ratio']:5.2f} "
          f"{r['marginal_images_per_s']:10.1f} {small[r['variant']]['median']['cpu_s']:7.2f} "
          f"{big[r['variant']]['median']['cpu_s']:7.2f} {r['marginal_cpu_ms_per_image']:15.2f} "
          f"{r['peak_n']:7.0f} {r['peak_4n']:7.0f} "
          f"{r['peak_growth']:+7.1%}")
  print("marg img/s = extra images / extra wall seconds from N to 4N (throughput without "
        "start-up); marg cpu ms/img = extra CPU seconds per extra image (robust to other load)")
  return rows


def targets(report: Dict) -> List[Dict]:
  """The issue's targets against what was measured (they are defined at N=20,000)."""
  first = {name: entry for name, entry in
           report["sizes"][str(report["images"])]["variants"].items() if entry["median"]}
  if "tool" not in first:  # not run, or refused
    return []
  tool = first["tool"]["median"]
  checks: List[Dict] = []

  def check(name: str, value: float, goal: str, ok: bool) -> None:
    checks.append({"target": name, "measured": round(value, 3), "goal": goal, "met": ok})

  if "naive" in first:
    x = first["naive"]["median"]["wall_s"] / tool["wall_s"]
    check("(1) speed vs (3) naive loop, x", x, ">= 2", x >= 2)
  if "naive-nodecode" in first:
    x = first["naive-nodecode"]["median"]["wall_s"] / tool["wall_s"]
    check("(1) speed vs (4) naive loop without decode, x", x, ">= 1", x >= 1)
  check("(1) peak RSS of the process tree, MB", tool["peak_rss_mb"], "<= 1500",
        tool["peak_rss_mb"] <= 1500)
  for row in report.get("scale", []):
    if row["variant"] == "tool":
      check("(1) peak RSS growth N -> 4N", row["peak_growth"], "< 0.15", row["peak_growth"] < 0.15)
  print(f"\nTargets (defined at N=20,000; measured at N={report['images']}):")
  for c in checks:
    print(f"  {c['target']:<48} {c['measured']:>10}  goal {c['goal']:<8} "
          f"{'met' if c['met'] else 'NOT met'}")
  return checks


if __name__ == "__main__":
  sys.exit(main())

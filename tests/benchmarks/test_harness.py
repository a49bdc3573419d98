"""The benchmark harness's bookkeeping (benchmarks/run.py, benchmarks/machine.py), on fake runs
and captured texts: nothing here runs a conversion or times anything."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import machine  # noqa: E402
import run as harness  # noqa: E402

# `LC_ALL=C lscpu` on the project's machine (vulnerabilities and flags cut), and the MHz lines
# a machine with frequency scaling adds
LSCPU = """\
Architecture:                            x86_64
CPU op-mode(s):                          32-bit, 64-bit
CPU(s):                                  2
On-line CPU(s) list:                     0,1
Vendor ID:                               AuthenticAMD
Model name:                              AMD EPYC
CPU family:                              25
Thread(s) per core:                      1
Core(s) per socket:                      2
Socket(s):                               1
BogoMIPS:                                4890.80
Hypervisor vendor:                       KVM
L1d cache:                               64 KiB (2 instances)
L1i cache:                               64 KiB (2 instances)
L2 cache:                                1 MiB (2 instances)
L3 cache:                                32 MiB (1 instance)
NUMA node0 CPU(s):                       0,1
"""
LSCPU_MHZ = LSCPU.replace("BogoMIPS:", "CPU max MHz:                             3500.0000\n"
                          "BogoMIPS:")


def test_busy_seconds_parses_proc_stat():
  # user nice system idle iowait irq softirq steal guest guest_nice: idle and iowait are not
  # busy; guest is already inside user
  line = "cpu  1000 50 300 90000 400 20 30 100 200 0\n"
  assert machine.parse_busy(line, 100) == pytest.approx((1000 + 50 + 300 + 20 + 30 + 100) / 100)
  assert machine.parse_busy("cpu  10 0 10 500\n", 10) == pytest.approx(2.0)  # old kernels


def test_busy_seconds_reads_the_first_line(tmp_path):
  stat = tmp_path / "stat"
  stat.write_text("cpu  200 0 100 5000 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
  ticks = os.sysconf("SC_CLK_TCK")
  assert machine.busy_seconds(str(stat)) == pytest.approx(300 / ticks)


def test_describe_parses_lscpu():
  found = machine.describe(LSCPU)
  assert found["model_name"] == "AMD EPYC"
  assert (found["cpus"], found["threads_per_core"], found["sockets"]) == (2, 1, 1)
  assert "mhz" not in found  # this kernel shows none
  assert found["caches"] == {"L1d": "64 KiB (2 instances)", "L1i": "64 KiB (2 instances)",
                             "L2": "1 MiB (2 instances)", "L3": "32 MiB (1 instance)"}
  assert found["kernel"] and found["python"]
  assert machine.describe(LSCPU_MHZ)["mhz"] == 3500.0
  line = machine.summary(found)
  assert line.startswith("AMD EPYC, 2 CPUs, 1 thread per core, L1d 64 KiB (2 instances)")
  assert f"Python {found['python']}" in line
  # the packages a figure depends on are named with their versions
  from importlib import metadata
  assert f"array-record {metadata.version('array-record')}" in line
  assert found["packages"]["apache-beam"] == metadata.version("apache-beam")


def test_describe_without_lscpu_still_names_the_cores():
  found = machine.describe("")
  assert found["cpus"] == os.cpu_count() and found["lscpu"] is False


def test_load_counts_other_cores_only():
  clocks = {"busy": iter([100.0, 110.0]), "load": iter([1.0, 1.5]), "own": iter([1.0, 1.5])}
  load = machine.Load(busy=lambda: next(clocks["busy"]), loadavg=lambda: next(clocks["load"]),
                      own=lambda: next(clocks["own"])).start().stop()
  # 10 busy seconds in 5 s of wall: 8 the run's, 0.5 this process's, 1.5 someone else's
  figures = load.figures(run_cpu_s=8.0, wall_s=5.0)
  assert figures == pytest.approx({"load_start": 1.0, "load_end": 1.5, "harness_cpu_s": 0.5,
                                   "other_cores": 0.3})
  assert machine.other_cores(busy_delta_s=7.0, own_cpu_s=8.0, wall_s=5.0) == 0.0  # clock skew


def test_disturbed_threshold():
  assert not machine.disturbed(machine.MAX_OTHER_CORES)
  assert machine.disturbed(machine.MAX_OTHER_CORES + 0.01)
  assert machine.disturbed(0.3, limit=0.2)


def fake_run(wall: float = 1.0, cpu: float = 1.0, other: float = 0.0, error: str = "",
             load: float = 1.0) -> harness.Run:
  return harness.Run(wall_s=wall, cpu_s=cpu, peak_rss_mb=100.0, processes=1,
                     returncode=1 if error else 0, error=error, other_cores=other,
                     load_avg=load, load_end=load + 0.2)


def variants(*names):
  return [harness.Variant(n, f"row {n}", "tool", []) for n in names]


def play(script, repeats=2, retries=2, limit=machine.MAX_OTHER_CORES):
  """schedule() with fake runs: script[name] lists each attempt's other cores (or an error)."""
  calls, left = [], {name: list(values) for name, values in script.items()}

  def run_one(variant, tag):
    calls.append((variant.name, tag))
    value = left[variant.name].pop(0)
    return fake_run(error=value) if isinstance(value, str) else fake_run(other=value)

  runs = harness.schedule(variants(*script), repeats, retries, limit, run_one)
  return runs, calls


def test_disturbed_runs_are_rerun_in_their_round():
  runs, calls = play({"a": [0.9, 0.1, 0.0], "b": [0.0, 0.7, 0.8, 0.2]})
  assert calls == [("a", "r0"), ("b", "r0"), ("a", "r0-retry1"),
                   ("a", "r1"), ("b", "r1"), ("b", "r1-retry1"), ("b", "r1-retry2")]
  assert [r.disturbed for r in runs["b"]] == [False, True, True, False]
  assert [(r.round, r.attempt) for r in runs["b"]] == [(0, 0), (1, 0), (1, 1), (1, 2)]
  summary = harness.summarize(runs["b"], 10, 1000, "s")
  assert (summary["status"], summary["counted"], summary["attempts"]) == ("ok", 2, 4)


def test_a_row_that_stays_disturbed_is_refused():
  runs, calls = play({"a": [0.0, 0.0], "b": [0.9, 0.8, 0.6, 0.0]}, repeats=1, retries=2)
  assert len(calls) == 4  # b: the run and its 2 retries, then no more
  summary = harness.summarize(runs["b"], 10, 1000, "s")
  assert summary["status"] == "disturbed" and summary["median"] is None
  assert summary["disturbed_runs"] == 3
  assert harness.refusal(summary).startswith("disturbed: not reported")
  # a limit of 1 core lets the same runs count
  runs, _ = play({"b": [0.9]}, repeats=1, limit=1.0)
  assert harness.summarize(runs["b"], 10, 1000, "s")["status"] == "ok"


def test_failed_runs_are_not_rerun_nor_counted():
  runs, calls = play({"a": ["exit code 1", 0.0]}, repeats=2)
  assert calls == [("a", "r0"), ("a", "r1")]
  summary = harness.summarize(runs["a"], 10, 1000, "s")
  assert (summary["status"], summary["counted"], summary["failed_runs"]) == ("ok", 1, 1)
  failed = harness.summarize([fake_run(error="killed")], 10, 1000, "s")
  assert failed["status"] == "failed" and failed["median"] is None


def test_median_and_spread_of_counted_runs():
  runs = [fake_run(wall=3.0, cpu=4.0, load=1.1), fake_run(wall=1.0, cpu=6.0, load=0.9),
          fake_run(wall=2.0, cpu=5.0, other=0.3, load=1.3),
          fake_run(wall=100.0, cpu=100.0, other=2.0)]  # disturbed: in no figure
  runs[3].disturbed = True
  summary = harness.summarize(runs, 10, 5_000_000, "s")
  m = summary["median"]
  assert (m["wall_s"], m["wall_min_s"], m["wall_max_s"]) == (2.0, 1.0, 3.0)
  assert (m["cpu_s"], m["cpu_min_s"], m["cpu_max_s"]) == (5.0, 4.0, 6.0)
  assert m["cpu_ms_per_image"] == pytest.approx(500.0)
  assert m["images_per_s"] == pytest.approx(5.0) and m["mb_per_s"] == pytest.approx(2.5)
  assert (m["load_min"], m["load_max"]) == pytest.approx((0.9, 1.5))
  assert m["other_cores_max"] == pytest.approx(0.3)
  assert (summary["counted"], summary["disturbed_runs"]) == (3, 1)


def row(wall, cpu, sitting="s1", disturbed=False):
  run = fake_run(wall=wall, cpu=cpu, other=0.9 if disturbed else 0.1)
  run.disturbed = disturbed
  return {"label": "x", **harness.summarize([run], 100, 10_000, sitting)}


def test_ratios_only_to_the_official_row_of_the_same_sitting():
  found = harness.ratios({"tool": row(5.0, 6.0), "official": row(10.0, 8.0),
                          "old": row(4.0, 4.0, sitting="s0")})
  assert found["tool"] == pytest.approx({"wall_x": 0.5, "cpu_x": 0.75})
  assert found["official"] == pytest.approx({"wall_x": 1.0, "cpu_x": 1.0})
  assert found["old"] is None  # another sitting: no ratio
  assert harness.ratios({"tool": row(5.0, 6.0)}) is None  # no official row: no column
  assert harness.ratios({"tool": row(5.0, 6.0),
                         "official": row(10.0, 8.0, disturbed=True)}) is None  # refused


def report(rows):
  return {"sizes": {"100": {"variants": rows}}, "machine": machine.describe(LSCPU),
          "command": "benchmarks/run.py --images 100", "started": "2026-11-26 10:00",
          "git": "0123456789abcdef", "repeats": 1, "retries": 2, "max_other_cores": 0.5}


def test_markdown_names_the_machine_and_refuses_disturbed_rows(capsys):
  text = harness.markdown(report({"tool": row(5.0, 6.0), "official": row(10.0, 8.0),
                                  "naive": row(7.0, 7.0, disturbed=True)}))
  lines = text.splitlines()
  assert lines[0].startswith("Machine (`lscpu`): AMD EPYC, 2 CPUs, 1 thread per core")
  assert "commit 0123456" in text and "other work at most 0.10 cores" in text
  header = next(line for line in lines if line.startswith("| row"))
  assert header.endswith("| wall x (6) | CPU x (6) |")
  tool = next(line for line in lines if line.startswith("| x | 1 | 5.00 (5.00-5.00)"))
  assert tool.endswith("| 0.50 | 0.75 |")
  refused = [line for line in lines if "disturbed: not reported" in line]
  assert len(refused) == 1 and refused[0].count("|") == header.count("|")
  harness.print_table(harness.table_rows(report({"tool": row(5.0, 6.0)})))
  assert "x(6)" not in capsys.readouterr().out  # no official row: no ratio column


def test_markdown_without_official_has_no_ratio_column():
  text = harness.markdown(report({"tool": row(5.0, 6.0)}))
  assert "x (6)" not in text


def test_scale_leaves_out_a_row_refused_at_either_size(capsys):
  sizes = {"10": {"tool": row(2.0, 3.0), "tool-mp": row(3.0, 4.0)},
           "40": {"tool": row(5.0, 9.0), "tool-mp": row(9.0, 9.0, disturbed=True)}}
  found = harness.scale_rows({"images": 10, "sizes": {
      n: {"variants": {name: dict(entry, label=name) for name, entry in rows.items()}}
      for n, rows in sizes.items()}})
  assert [r["variant"] for r in found] == ["tool"]
  assert found[0]["marginal_cpu_ms_per_image"] == pytest.approx(200.0)
  assert "tool-mp: not reported (40: disturbed: not reported" in capsys.readouterr().out


def test_same_bytes_names_what_differs_and_ignores_the_times(tmp_path):
  import json
  import same_bytes
  a, b = tmp_path / "a", tmp_path / "b"
  for out, created, shard in ((a, "2026-01-01", b"\x01\x02"), (b, "2026-02-02", b"\x01\x02")):
    out.mkdir()
    (out / "train-00000-of-00001.tfrecord").write_bytes(shard)
    (out / "manifest.json").write_text(json.dumps({"created": created, "splits": {"train": 1}}))
    (out / "README.md").write_text(f"made {created}")
  (a / "errors-00000-of-00001.jsonl").write_text('{"k": 1}\n{"k": 2}\n')
  (b / "errors-00000-of-00001.jsonl").write_text('{"k": 2}\n{"k": 1}\n')  # workers' order
  assert same_bytes.differences(a, b) == []
  (b / "train-00000-of-00001.tfrecord").write_bytes(b"\x01\x03")
  (b / "manifest.json").write_text(json.dumps({"created": "x", "splits": {"train": 2}}))
  (b / "label_map.pbtxt").write_text("")
  assert same_bytes.differences(a, b) == [
      "only in one output: ['label_map.pbtxt']", "manifest.json differs",
      "train-00000-of-00001.tfrecord differs"]

"""The machine a benchmark ran on, and what else it was doing meanwhile (no Beam, stdlib only).

- `describe()`: a dict naming the machine: `lscpu`'s model name, CPUs, threads per core, MHz
  (when the kernel shows it) and caches, plus kernel, Python and total memory. `summary()`
  makes it one line for a table's caption.
- `busy_seconds()`: machine-wide busy CPU seconds so far (all cores), from /proc/stat.
- `Load`: around one timed run, the 1-minute load average at its start and end and the
  *other* cores used during it: (machine busy seconds - the run's own CPU seconds - this
  process's own) / wall seconds. A run beside more than MAX_OTHER_CORES of other work is
  disturbed (`disturbed()`): its time says as much about the neighbours as about the code.
"""
from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
from typing import Callable, Dict, Optional

# Other work, in cores, above which a run is disturbed (run.py's --max-other-cores)
MAX_OTHER_CORES = 0.5
CACHES = ("L1d", "L1i", "L2", "L3")


def parse_busy(line: str, ticks_per_second: float) -> float:
  """Busy CPU seconds of /proc/stat's first line ("cpu  user nice system idle iowait irq
  softirq steal ..."): all but idle and iowait. Steal counts: time the hypervisor gave to
  other guests is time a run did not get. guest and guest_nice are already in user and nice."""
  fields = [int(x) for x in line.split()[1:]]
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
  return (sum(fields[:8]) - idle) / ticks_per_second


def busy_seconds(path: str = "/proc/stat") -> float:
  """Machine-wide busy CPU seconds so far (all cores), from /proc/stat."""
  with open(path) as f:
    return parse_busy(f.readline(), os.sysconf("SC_CLK_TCK"))


def own_cpu_seconds() -> float:
  """User + system seconds of this process (all its threads: the tree sampler's too)."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def parse_lscpu(text: str) -> Dict[str, object]:
  """The fields of `lscpu` (LC_ALL=C) that name a machine."""
  raw: Dict[str, str] = {}
  for line in text.splitlines():
    key, sep, value = line.partition(":")
    if sep and key.strip() not in raw:
      raw[key.strip()] = value.strip()

  def number(key: str) -> Optional[float]:
    match = re.match(r"[0-9.]+", raw.get(key, ""))
    return float(match.group()) if match else None

  result: Dict[str, object] = {"model_name": raw.get("Model name")}
  for field, key in (("cpus", "CPU(s)"), ("threads_per_core", "Thread(s) per core"),
                     ("cores_per_socket", "Core(s) per socket"), ("sockets", "Socket(s)")):
    value = number(key)
    result[field] = int(value) if value is not None else None
  mhz = number("CPU MHz") or number("CPU max MHz")
  if mhz:
    result["mhz"] = mhz
  if raw.get("Hypervisor vendor"):
    result["hypervisor"] = raw["Hypervisor vendor"]
  result["caches"] = {name: raw[f"{name} cache"] for name in CACHES if f"{name} cache" in raw}
  return result


def memory_bytes(path: str = "/proc/meminfo") -> Optional[int]:
  try:
    with open(path) as f:
      for line in f:
        if line.startswith("MemTotal:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def describe(lscpu_text: Optional[str] = None) -> Dict[str, object]:
  """The machine: lscpu's fields (see parse_lscpu), kernel, Python, total memory.

  lscpu_text: a captured `lscpu` output (tests); by default lscpu is run."""
  if lscpu_text is None:
    try:
      lscpu_text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30,
                                  env=dict(os.environ, LC_ALL="C")).stdout
    except (OSError, subprocess.SubprocessError):
      lscpu_text = ""
  result = parse_lscpu(lscpu_text)
  if result["cpus"] is None:
    result["cpus"] = os.cpu_count()
  memory = memory_bytes()
  result.update({"kernel": f"{platform.system()} {platform.release()}",
                 "python": platform.python_version(), "packages": package_versions(),
                 "memory_gb": round(memory / 1e9, 1) if memory else None,
                 "lscpu": bool(lscpu_text)})
  return result


# what a figure depends on besides the machine: array-record 0.8.3+ writes through a 16 MB buffer
# that made ArrayRecord shards 1.3x TFRecord's wall time here, 0.8.2 1.1-1.2x (performance.md)
PACKAGES = ("apache-beam", "tensorflow", "pillow", "array-record")


def package_versions(names=PACKAGES) -> Dict[str, Optional[str]]:
  from importlib import metadata
  found: Dict[str, Optional[str]] = {}
  for name in names:
    try:
      found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      found[name] = None
  return found


def summary(machine: Dict) -> str:
  """One line: "AMD EPYC, 2 CPUs, 1 thread per core, L2 1 MiB (2 instances), ...; 24.6 GB
  RAM; Linux 6.8.0; Python 3.11.9; apache-beam 2.78.0; ...; array-record 0.8.2"."""
  cpu = [machine.get("model_name") or "unknown CPU", f"{machine.get('cpus')} CPUs"]
  if machine.get("threads_per_core"):
    threads = machine["threads_per_core"]
    cpu.append(f"{threads} thread{'s' if threads != 1 else ''} per core")
  if machine.get("mhz"):
    cpu.append(f"{machine['mhz']:.0f} MHz")
  cpu += [f"{name} {size}" for name, size in (machine.get("caches") or {}).items()]
  if machine.get("hypervisor"):
    cpu.append(f"{machine['hypervisor']} guest")
  parts = [", ".join(cpu)]
  if machine.get("memory_gb"):
    parts.append(f"{machine['memory_gb']} GB RAM")
  parts += [machine.get("kernel", ""), f"Python {machine.get('python', '')}"]
  parts += [f"{name} {version}" for name, version in (machine.get("packages") or {}).items()
            if version]
  return "; ".join(p for p in parts if p)


def other_cores(busy_delta_s: float, own_cpu_s: float, wall_s: float) -> float:
  """Cores used by everything else during a run (never below 0: the two clocks differ)."""
  return max(0.0, (busy_delta_s - own_cpu_s) / max(wall_s, 1e-9))


def disturbed(other: float, limit: float = MAX_OTHER_CORES) -> bool:
  return other > limit


class Load:
  """The machine's other load around one timed run:

    load = Load().start()
    ... run; then, as soon as it has exited:
    load.stop()
    figures = load.figures(run_cpu_s, wall_s)  # load_start, load_end, other_cores, harness_cpu_s

  This process's own CPU meanwhile (the tree sampler's thread) is not counted as other load;
  it is reported as harness_cpu_s. The clocks are injectable (tests)."""

  def __init__(self, busy: Callable[[], float] = busy_seconds,
               loadavg: Callable[[], float] = lambda: os.getloadavg()[0],
               own: Callable[[], float] = own_cpu_seconds):
    self._busy, self._loadavg, self._own = busy, loadavg, own

  def _snapshot(self) -> tuple:
    return self._loadavg(), self._busy(), self._own()

  def start(self) -> "Load":
    self.at_start = self._snapshot()
    return self

  def stop(self) -> "Load":
    self.at_end = self._snapshot()
    return self

  def figures(self, run_cpu_s: float, wall_s: float) -> Dict[str, float]:
    (load_start, busy_start, own_start), (load_end, busy_end, own_end) = (self.at_start,
                                                                          self.at_end)
    harness = own_end - own_start
    return {"load_start": load_start, "load_end": load_end, "harness_cpu_s": harness,
            "other_cores": other_cores(busy_end - busy_start, run_cpu_s + harness, wall_s)}

if __name__ == "__main__":
  import json
  print(json.dumps(describe(), indent=2))
  print(summary(describe()))

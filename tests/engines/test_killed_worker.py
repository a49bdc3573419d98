"""A worker killed mid-run on the Spark cluster: the same output after Spark's retry, or a
failure that leaves the output as it was; never a mixed output with exit 0 (issue 39).

The output folder first holds an earlier run's output (the DirectRunner's, one shard). The
conversion then runs on the cluster with --overwrite (three shards, PROCESS workers: worker.sh -> boot ->
sdk_worker_main under each executor), and once an executor's SDK harness has been at work for a
few seconds, and the conversion is still running and has published nothing, the test kills
(SIGKILL) the victim:
- `executor`: that executor's JVM (CoarseGrainedExecutorBackend, a child of a Spark worker
  daemon): Spark's master gives the application a new executor, and the driver (Beam's job
  server) runs the lost tasks, and the stages whose shuffle output was on it, again;
- `harness`: the SDK harness process (python -m apache_beam.runners.worker.sdk_worker_main):
  boot restarts it, the executor's bundle in flight fails, and Spark retries the task.
Then either
- the conversion exits 0 and every file of the output equals the DirectRunner's conversion of
  the same arguments (compare_runners.differences: byte for byte, README cards and the
  manifest's times aside), and `beam-tfrecord verify` passes; or
- it exits non-zero and every visible file of the output is the earlier run's, byte for byte
  (the failed run's report stays in its hidden run directory: docs/safety.md).
Which one happened is printed (`-s`), and docs/engines.md says which and why. The cluster must
still have two live workers at the end, and no SDK worker process of the run may outlive it.

Marked `engines`: `python -m pytest -m engines tests/engines/test_killed_worker.py` after
`bash deploy/engines/setup.sh spark` (a running cluster is used, else one is started).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_runners  # noqa: E402
from test_spark import _master, cluster  # noqa: E402,F401  (the fixture, not the test)

pytestmark = pytest.mark.engines

HARNESS = "apache_beam.runners.worker.sdk_worker_main"
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@pytest.fixture(autouse=True)
def _selected(request):
  compare_runners.skip_unless_selected(
      request, "Spark jobs with a worker killed; after bash deploy/engines/setup.sh spark")


def _processes() -> Dict[int, tuple]:
  """{pid: (ppid, args)} of every process."""
  found = {}
  for entry in Path("/proc").iterdir():
    if not entry.name.isdigit():
      continue
    try:
      args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
      ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
      continue
    found[int(entry.name)] = (ppid, args)
  return found


def _ancestor(pid: int, procs: Dict[int, tuple], marker: str) -> Optional[int]:
  while pid in procs and pid > 1:
    ppid, args = procs[pid]
    if marker in args:
      return pid
    pid = ppid
  return None


def _age(pid: int) -> float:
  """Seconds since the process started."""
  try:
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
  except (OSError, ValueError, IndexError):
    return 0.0
  uptime = float(Path("/proc/uptime").read_text().split()[0])
  return uptime - start / os.sysconf("SC_CLK_TCK")


def _visible(root: Path) -> Dict[str, bytes]:
  """Every file of an output a reader sees (not the hidden run directories), with its bytes."""
  if not root.exists():
    return {}
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
          if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)}


def _harnesses(run_tmp_prefix: str) -> List[int]:
  """This run's SDK harness processes under an executor (their boot's folder is the run's)."""
  procs = _processes()
  found = []
  for pid, (ppid, args) in procs.items():
    if HARNESS in args and ppid in procs and run_tmp_prefix in procs[ppid][1]:
      if _ancestor(pid, procs, EXECUTOR):
        found.append(pid)
  return found


def _workers_of_run(run_tmp_prefix: str) -> List[int]:
  """boot and harness processes of this run (boot's --semi_persist_dir is in its folder)."""
  procs = _processes()
  boots = [pid for pid, (_, args) in procs.items()
           if "python-boot" in args and run_tmp_prefix in args]
  return boots + [pid for pid, (ppid, args) in procs.items() if ppid in boots]


@pytest.mark.parametrize("victim", ["executor", "harness"])
def test_a_worker_killed_mid_run(victim, cluster, tmp_path):  # noqa: F811
  import conftest  # noqa: E402  (tests/, on sys.path through compare_runners)
  ds = conftest.make_dataset(tmp_path / "data", count=40, seed=5)
  args = ["--format=voc", *ds.inputs("voc")]
  out, reference = tmp_path / "out", tmp_path / "reference"
  earlier = compare_runners.convert_direct(args + ["--num-shards=1"], out, timeout=300)
  assert earlier.returncode == 0, earlier.stderr[-3000:]
  before = _visible(out)
  assert any(name.endswith(".tfrecord") for name in before), sorted(before)
  ref = compare_runners.convert_direct(args + ["--num-shards=3", "--overwrite"], reference,
                                      timeout=300)   # (the manifest records --overwrite)
  assert ref.returncode == 0, ref.stderr[-3000:]

  # the run's engine scratch folder (convert-on.sh's RUN_TMP) in a TMPDIR of this test's own,
  # so that its workers' processes are told apart from any other job's
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  env = compare_runners.environment(compare_runners.REPO)
  env["TMPDIR"] = str(scratch)
  log = open(tmp_path / "spark.log", "w+")
  run = subprocess.Popen(
      ["bash", str(compare_runners.CONVERT_ON), "spark", "--", *args, "--num-shards=3",
       "--overwrite", f"--output={out}"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
      start_new_session=True)
  killed = None
  try:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None:
      busy = [pid for pid in _harnesses(str(scratch)) if _age(pid) >= 8]
      if busy:
        pid = busy[0]
        target = _ancestor(pid, _processes(), EXECUTOR) if victim == "executor" else pid
        assert target
        assert _visible(out) == before, "published before the kill: not mid-run"
        os.kill(target, signal.SIGKILL)
        killed = (target, pid)
        break
      time.sleep(1)
    assert killed, ("no SDK harness was at work before the conversion ended or in 600 s: "
                    + open(tmp_path / "spark.log").read()[-3000:])
    try:
      code = run.wait(timeout=900)
    except subprocess.TimeoutExpired:
      os.killpg(run.pid, signal.SIGTERM)
      run.wait(timeout=60)
      pytest.fail("the conversion did not end within 15 minutes of the kill: "
                  + open(tmp_path / "spark.log").read()[-3000:])
  finally:
    if run.poll() is None:
      os.killpg(run.pid, signal.SIGKILL)
      run.wait()
    log.close()
  # no SDK worker process of the run outlives it (worker.sh's watchdog ends the boot an
  # executor's death orphans, which would otherwise restart its harness against an endpoint
  # that is gone)
  deadline = time.monotonic() + 90
  left = _workers_of_run(str(scratch))
  while left and time.monotonic() < deadline:
    time.sleep(2)
    left = _workers_of_run(str(scratch))
  for pid in left:   # do not leave them running for the tests after this one
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  text = (tmp_path / "spark.log").read_text()
  after = _visible(out)
  if code == 0:
    outcome = "completed after the retry"
    assert "on spark://" in text
    problems = compare_runners.differences(reference, out)
    assert problems == [], problems
    verified = subprocess.run([compare_runners.python(), "-m", "beam_tfrecord.cli", "verify",
                               str(out)], env=compare_runners.environment(compare_runners.REPO),
                              capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
  else:
    outcome = f"failed with exit {code}"
    assert after == before, ("a failed run changed the output: "
                             f"{sorted(set(after) ^ set(before))} / changed "
                             f"{[k for k in after if k in before and after[k] != before[k]]}")
  print(f"\n{victim} killed (pid {killed[0]}; harness {killed[1]}): the conversion {outcome}")
  assert left == [], f"SDK worker processes outlived the run: {left}"
  alive = [w for w in _master().get("workers", []) if w.get("state") == "ALIVE"]
  assert len(alive) >= 2, f"the master counts {len(alive)} ALIVE workers after the run"

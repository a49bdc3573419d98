"""cli/process.one_blas_thread: numpy's OpenBLAS runs one thread in a command's processes,
unless the user chose a number."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

# the command (its parser exits on --help, after the setting), then numpy: the threads the
# process has (OpenBLAS starts its own when numpy loads)
CODE = (
    "import os\n"
    "from beam_tfrecord.cli import main\n"
    "try:\n"
    "  main(['--help'])\n"
    "except SystemExit:\n"
    "  pass\n"
    "import numpy\n"
    "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))\n")


def run(env_value=None):
  env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
  if env_value is not None:
    env["OPENBLAS_NUM_THREADS"] = env_value
  out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                       timeout=120, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  setting, threads = out.stdout.split()[-2:]
  return setting, int(threads)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_command_runs_numpy_with_one_blas_thread():
  assert run() == ("1", 1)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; OpenBLAS starts no second one on 1 core")
def test_the_users_own_setting_is_kept():
  # and the count tells the difference: OpenBLAS's own thread beside the main one
  assert run("2") == ("2", 2)

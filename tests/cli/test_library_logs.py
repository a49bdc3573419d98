"""What the commands print on stderr: their own lines, never TensorFlow's, absl's or Beam's
log lines (cli/library_logs.py). Real subprocesses: what matters is what a process prints,
C++ logging included, which an in-process run cannot see."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, make_dataset, subprocess_env

from beam_tfrecord.cli import library_logs


def _clean_env() -> dict:
  """The environment of a user who set nothing: the suite's TF_CPP_MIN_LOG_LEVEL=2 (which
  would hide part of the noise) removed."""
  env = subprocess_env()
  for name in ("TF_CPP_MIN_LOG_LEVEL", library_logs.VERBOSE_ENV):
    env.pop(name, None)
  return env


def _start(*args) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", "beam_tfrecord.cli", *map(str, args)],
                          cwd=str(REPO), env=_clean_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, code: int = 0) -> str:
  """The process's stdout, once it ended with `code` and printed on stderr only the tool's
  own lines."""
  out, err = process.communicate(timeout=300)  # bounds a hang only
  assert process.returncode == code, f"{process.args}\n{out}\n{err}"
  foreign = [line for line in err.splitlines() if not line.startswith("beam-tfrecord")]
  assert not foreign, f"{process.args[3:]} printed library log lines:\n" + "\n".join(foreign)
  return out


@pytest.mark.e2e
def test_commands_print_no_library_log_lines(tmp_path):
  """convert, verify (passing and failing), inspect, show and demo, each in a fresh process
  with no logging variable set: stderr holds only beam-tfrecord's lines. The processes that
  do not depend on each other run at once."""
  data = make_dataset(tmp_path / "data", count=6, seed=3, extras=False)
  out = tmp_path / "out"
  demo = _start("demo", "--output", tmp_path / "demo", "--images", 6)
  _finish(_start("convert", "--format", "coco", *data.inputs("coco"), "--output", out))
  broken = tmp_path / "broken"
  shutil.copytree(out, broken)
  shard = sorted(broken.glob("train-*.tfrecord"))[0]
  with open(shard, "r+b") as f:  # 16 bytes of the first record's payload flipped
    f.seek(20)
    flipped = bytes(b ^ 0xFF for b in f.read(16))
    f.seek(20)
    f.write(flipped)
  running = {
      "verify": _start("verify", out),
      "verify broken": _start("verify", broken),
      "inspect": _start("inspect", out),
      "show": _start("show", out, "--output", tmp_path / "show.png"),
  }
  assert "OK" in _finish(running["verify"])
  assert "corrupt record" in _finish(running["verify broken"], code=1)
  assert "status: ok" in _finish(running["inspect"])
  _finish(running["show"])
  assert (tmp_path / "show.png").stat().st_size > 0
  assert "verify: 6 examples parsed with TensorFlow: OK" in _finish(demo)


def test_verbose_leaves_library_logging_alone(monkeypatch):
  """BEAM_TFRECORD_VERBOSE=1: TF_CPP_MIN_LOG_LEVEL is not set for TensorFlow, and the
  libraries' Python loggers are not raised above their default."""
  import logging
  monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # the suite's handlers stay
  loggers = [logging.getLogger(name) for name in library_logs.LIBRARY_LOGGERS]
  for logger in loggers:
    monkeypatch.setattr(logger, "level", logger.level)
  monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
  monkeypatch.setenv(library_logs.VERBOSE_ENV, "1")
  library_logs.configure("inspect")
  assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
  assert all(logger.level == logging.NOTSET for logger in loggers)
  monkeypatch.delenv(library_logs.VERBOSE_ENV)
  library_logs.configure("inspect")
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
  assert all(logger.level == logging.ERROR for logger in loggers)


def test_cpp_log_lines_are_dropped_and_other_lines_kept():
  """C++ log lines and the lines continuing a message go; a line before them, or after a
  blank line, stays."""
  text = (b"a line of someone else's\n"
          b"WARNING: All log messages before absl::InitializeLog() is called are written to "
          b"STDERR\nI0000 00:00:1795870453.746844    6750 cudart_stub.cc:31] Could not find "
          b"cuda drivers on your machine, GPU will not be used.\nI0000 00:00:1795870453.81 6750"
          b" cpu_feature_guard.cc:227] This TensorFlow binary is optimized\nTo enable the "
          b"following instructions: AVX2 FMA, in other operations, rebuild TensorFlow\n"
          b"E0000 00:00:1795870459.202193    6750 cuda_platform.cc:52] failed call to cuInit\n"
          b"\nanother line\n")
  assert library_logs._without_cpp_logs(text) == b"a line of someone else's\n\nanother line\n"

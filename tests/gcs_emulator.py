"""A local Cloud Storage emulator (the `gcp-storage-emulator` package) for the gs:// tests:
in memory, on a free loopback port, with one bucket, and Beam's credentials stubbed (anonymous,
which Beam falls back to anyway) so that auth does not retry for ~36 s."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from typing import Iterator

import pytest


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def running(bucket: str) -> Iterator[str]:
  """The emulator's URL while it runs (STORAGE_EMULATOR_HOST set); stopped afterwards."""
  port = free_port()
  proc = subprocess.Popen(
      [sys.executable, "-m", "gcp_storage_emulator", "start", "--host=127.0.0.1",
       f"--port={port}", "--in-memory", f"--default-bucket={bucket}", "--quiet"],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.monotonic() + 30
  while True:
    try:
      socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
      break
    except OSError:
      if proc.poll() is not None or time.monotonic() > deadline:
        proc.kill()
        pytest.fail(f"storage emulator did not start: {proc.stderr.read().decode()[-2000:]}")
      time.sleep(0.1)
  from beam_tfrecord.storage import gcs
  gcs.client.cache_clear()  # a client of an earlier emulator (another module's) talks to it
  mp = pytest.MonkeyPatch()
  from apache_beam.internal.gcp import auth
  mp.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
  mp.setenv("NO_GCE_CHECK", "true")
  mp.setattr(auth._Credentials, "_credentials_init", True)
  mp.setattr(auth._Credentials, "_credentials", None)
  try:
    yield f"http://127.0.0.1:{port}"
  finally:
    gcs.client.cache_clear()
    mp.undo()
    proc.terminate()
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      proc.kill()

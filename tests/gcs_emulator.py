"""A local Cloud Storage emulator (the `gcp-storage-emulator` package) for the gs:// tests:
in memory, on a free loopback port, with one bucket, and Beam's credentials stubbed (anonymous,
which Beam falls back to anyway) so that auth does not retry for ~36 s: in this process, and
in the Python processes started meanwhile (shard writer processes, subprocess runs) through a
sitecustomize module on their PYTHONPATH."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import pytest

# Imported by every Python process started with the emulator's environment: once Beam's auth
# module is loaded (if ever: a writer process may import no Beam at all), its credentials are
# the anonymous ones Beam ends with after ~30 s of retried lookups on a machine without any.
# (Nothing else is changed: requests still go through Beam's GCS filesystem to the emulator.)
SITECUSTOMIZE = """\
import importlib.abc, importlib.util, sys

_AUTH = "apache_beam.internal.gcp.auth"


class _AnonymousBeamCredentials(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name != _AUTH:
      return None
    sys.meta_path.remove(self)
    try:
      spec = importlib.util.find_spec(name)
    finally:
      sys.meta_path.insert(0, self)
    if spec is None or spec.loader is None:
      return spec
    run = spec.loader.exec_module

    def exec_module(module):
      run(module)
      module._Credentials._credentials_init = True
      module._Credentials._credentials = None
    spec.loader.exec_module = exec_module
    return spec


sys.meta_path.insert(0, _AnonymousBeamCredentials())
"""


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
  site = tempfile.TemporaryDirectory(prefix="gcs-emulator-site-")
  with open(os.path.join(site.name, "sitecustomize.py"), "w") as f:
    f.write(SITECUSTOMIZE)
  mp.setenv("PYTHONPATH", os.pathsep.join(
      [site.name] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
  mp.syspath_prepend(site.name)  # writer processes get this process's sys.path as PYTHONPATH
  try:
    yield f"http://127.0.0.1:{port}"
  finally:
    gcs.client.cache_clear()
    mp.undo()
    site.cleanup()
    proc.terminate()
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      proc.kill()

"""gs:// reads under object-store latency: the shard writer against reading one image at a time.

Starts the Cloud Storage emulator (`gcp-storage-emulator`, in memory) behind a small TCP proxy
that delays every chunk the client sends by --latency-ms (one request is one chunk for the
GETs that matter here, so this is a per-request round trip), uploads N benchmark images and
their COCO JSON without the delay, then, with the delay on, times in this process:
  serial    reading every image once through Beam's FileSystems, one after another
  ahead     the shard writer's read path (prefetch of encode.fetch), without Beam
  tool-1    beam-tfrecord convert gs:// -> local with read-ahead and batched lookups off
  tool      the same with the defaults
  out-tfrecord, out-array_record
            local images -> a gs:// output, TFRecord and --file-format array_record (written
            to a local file, then copied up: issue 41)
The two tool outputs must be byte-identical (and equal a local conversion of the same files),
and the gs:// outputs' records equal it too.

  python benchmarks/gcs_latency.py --images 400 --latency-ms 20 --repeats 3
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
if REPO not in sys.path:
  sys.path.insert(0, REPO)
import dataset as datasets  # noqa: E402

BUCKET = "bench"


class LatencyProxy(threading.Thread):
  """TCP proxy to (host, port) that sleeps `delay` seconds before forwarding each chunk the
  client sends. `delay` can be changed while it runs."""

  def __init__(self, target_port: int):
    super().__init__(daemon=True)
    self.target = ("127.0.0.1", target_port)
    self.delay = 0.0
    self.server = socket.socket()
    self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    self.server.bind(("127.0.0.1", 0))
    self.server.listen(128)
    self.port = self.server.getsockname()[1]

  def run(self) -> None:
    while True:
      try:
        client, _ = self.server.accept()
      except OSError:
        return
      upstream = socket.create_connection(self.target)
      threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
      threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

  def _pump(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
    try:
      while True:
        data = src.recv(1 << 16)
        if not data:
          break
        if delayed and self.delay:
          time.sleep(self.delay)
        dst.sendall(data)
    except OSError:
      pass
    finally:
      for s in (src, dst):
        with contextlib.suppress(OSError):
          s.shutdown(socket.SHUT_RDWR)


# The emulator serves one request at a time with a listen backlog of 5: concurrent clients
# then wait for SYN retransmits (~1 s each), which no real object store does. Serve each
# request on its own thread, with a deeper backlog; reads of the in-memory store are safe.
_THREADED_EMULATOR = """
import sys, http.server
class Threaded(http.server.ThreadingHTTPServer):
  request_queue_size = 256
  daemon_threads = True
http.server.HTTPServer = Threaded
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def emulator():
  """The emulator on a free port behind a LatencyProxy; the environment points Beam at it."""
  port = _free_port()
  proc = subprocess.Popen(
      [sys.executable, "-c", _THREADED_EMULATOR, "start", "--host=127.0.0.1",
       f"--port={port}", "--in-memory", f"--default-bucket={BUCKET}", "--quiet"],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 60
    while True:
      try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        break
      except OSError:
        if proc.poll() is not None or time.monotonic() > deadline:
          raise RuntimeError("the storage emulator did not start")
        time.sleep(0.1)
    proxy = LatencyProxy(port)
    proxy.start()
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy.port}"
    os.environ["NO_GCE_CHECK"] = "true"
    from apache_beam.internal.gcp import auth
    auth._Credentials._credentials_init = True  # anonymous: no ~36 s of auth retries
    auth._Credentials._credentials = None
    yield proxy
  finally:
    proc.terminate()
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      proc.kill()


def _digest(directory: str) -> str:
  digest = hashlib.sha256()
  for name in sorted(n for n in os.listdir(directory) if n.endswith(".tfrecord")):
    digest.update(name.encode() + b"\0")
    with open(os.path.join(directory, name), "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()


def _convert(args: Sequence[str], remote_read_ahead: Optional[int]) -> float:
  from beam_tfrecord import cli
  from beam_tfrecord.prepare import locate
  from beam_tfrecord.write import shard_writer as sink
  saved = sink.REMOTE_READ_AHEAD, locate.REMOTE_LOCATE_THREADS
  if remote_read_ahead is not None:
    sink.REMOTE_READ_AHEAD = locate.REMOTE_LOCATE_THREADS = remote_read_ahead
  try:
    start = time.perf_counter()
    code = cli.main(list(args))
    if code:
      raise RuntimeError(f"convert exited {code}")
    return time.perf_counter() - start
  finally:
    sink.REMOTE_READ_AHEAD, locate.REMOTE_LOCATE_THREADS = saved


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=400)
  parser.add_argument("--latency-ms", type=float, default=20.0)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--cache-dir", default=datasets.DEFAULT_CACHE)
  args = parser.parse_args(argv)
  data = datasets.ensure_dataset(args.images, args.cache_dir)
  work = tempfile.mkdtemp(prefix="gcs-latency-")
  from apache_beam.io.filesystems import FileSystems
  names = sorted(n for n in os.listdir(data.images_dir))[: args.images]
  results: Dict[str, List[float]] = {"serial": [], "ahead": [], "tool-1": [], "tool": [],
                                     "out-tfrecord": [], "out-array_record": []}
  digests: Dict[str, set] = {"tool-1": set(), "tool": set(), "local": set()}
  try:
    with emulator() as proxy:
      root = f"gs://{BUCKET}/images"
      for name in names:
        with open(os.path.join(data.images_dir, name), "rb") as fin, \
            FileSystems.create(f"{root}/{name}") as fout:
          fout.write(fin.read())
      ann = f"gs://{BUCKET}/coco.json"
      with open(data.annotations, "rb") as fin, FileSystems.create(ann) as fout:
        fout.write(fin.read())
      common = ["convert", "--format=coco", f"--input=train={ann}", f"--images={root}",
                "--num-shards=2", "--runner=FnApiRunner"]
      local = os.path.join(work, "local")
      _convert(["convert", "--format=coco", f"--input=train={data.annotations}",
                f"--images={data.images_dir}", "--num-shards=2", "--runner=FnApiRunner",
                f"--output={local}"], None)
      digests["local"].add(_digest(local))
      proxy.delay = args.latency_ms / 1000
      same_records = True
      for rep in range(args.repeats):
        start = time.perf_counter()
        for name in names:
          with FileSystems.open(f"{root}/{name}", compression_type="uncompressed") as f:
            f.read()
        results["serial"].append(time.perf_counter() - start)
        # the shard writer's own read path (encode.fetch through prefetch), without Beam
        from beam_tfrecord.storage import prefetch
        from beam_tfrecord.write import encode
        from beam_tfrecord.write import shard_writer as sink
        sizes = {n: os.path.getsize(os.path.join(data.images_dir, n)) for n in names}
        start = time.perf_counter()
        for _, result in prefetch.prefetch(names, lambda n: encode.fetch(f"{root}/{n}"),
                                           sizes.get, sink.REMOTE_READ_AHEAD,
                                           sink.READ_AHEAD_BYTES):
          result()
        results["ahead"].append(time.perf_counter() - start)
        for row, ahead in (("tool-1", 1), ("tool", None)):
          out = os.path.join(work, f"{row}-{rep}")
          results[row].append(_convert(common + [f"--output={out}"], ahead))
          digests[row].add(_digest(out))
          shutil.rmtree(out, ignore_errors=True)
        for fmt in ("tfrecord", "array_record"):  # local images, a gs:// output
          out = f"gs://{BUCKET}/out-{fmt}-{rep}"
          results[f"out-{fmt}"].append(_convert(
              ["convert", "--format=coco", f"--input=train={data.annotations}",
               f"--images={data.images_dir}", "--num-shards=2", "--runner=FnApiRunner",
               f"--file-format={fmt}", f"--output={out}"], None))
          same_records &= _remote_records(out, fmt) == _local_records(local)
        print(f"  [{rep + 1}/{args.repeats}] " + "  ".join(
            f"{k} {v[-1]:.2f} s" for k, v in results.items()), flush=True)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  med = {k: statistics.median(v) for k, v in results.items()}
  identical = len(set().union(*digests.values())) == 1
  print(f"\ngs:// on the storage emulator, {args.latency_ms:g} ms per request, {len(names)} "
        f"images, medians of {args.repeats}:")
  print(f"  reading one image at a time (no conversion)   {med['serial']:7.2f} s")
  print(f"  the writer's read-ahead (fetch + SHA-256)      {med['ahead']:7.2f} s   "
        f"{med['serial'] / med['ahead']:.1f}x faster")
  print(f"  convert, read-ahead and lookups 1 at a time    {med['tool-1']:7.2f} s")
  print(f"  convert, defaults                              {med['tool']:7.2f} s")
  print(f"  defaults vs one at a time: {med['serial'] / med['tool']:.1f}x faster than the bare "
        f"serial reads, {med['tool-1'] / med['tool']:.1f}x faster than the serial writer")
  print(f"  shards identical (defaults, serial writer, local conversion): "
        f"{'yes' if identical else 'NO'}")
  print(f"  local images to a gs:// output: TFRecord {med['out-tfrecord']:7.2f} s, "
        f"ArrayRecord {med['out-array_record']:7.2f} s "
        f"({med['out-array_record'] / med['out-tfrecord']:.2f}x); their records equal the "
        f"local conversion's: {'yes' if same_records else 'NO'}")
  return 0 if identical and same_records else 1


def _local_records(directory: str) -> List[bytes]:
  from beam_tfrecord.storage import record_files
  return [r for n in sorted(os.listdir(directory)) if n.endswith(".tfrecord")
          for r in record_files.read_records(os.path.join(directory, n))]


def _remote_records(output: str, file_format: str) -> List[bytes]:
  import json

  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord.storage import record_files
  with FileSystems.open(f"{output}/manifest.json", compression_type="uncompressed") as f:
    shards = sorted(s["path"] for split in json.load(f)["splits"].values()
                    for s in split["shards"])
  return [r for name in shards
          for r in record_files.read_records(f"{output}/{name}", file_format)]


if __name__ == "__main__":
  sys.exit(main())

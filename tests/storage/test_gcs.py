"""gs:// end to end against a local Cloud Storage emulator (the `gcp-storage-emulator` package).

Annotations and images are uploaded to the emulator, converted from gs:// to gs:// through
Beam's own GCS filesystem (google-cloud-storage honours STORAGE_EMULATOR_HOST), and the output
must equal, byte for byte, the same conversion of the same files on local disk. Credentials are
stubbed (anonymous, which Beam falls back to anyway) so auth does not retry for ~36 s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import gcs_emulator
import pytest

pytest.importorskip("gcp_storage_emulator")

from apache_beam.io.filesystems import FileSystems  # noqa: E402

from beam_tfrecord import cli, sample
from beam_tfrecord.finalize import card  # noqa: E402

pytestmark = pytest.mark.e2e  # an emulator process, conversions through it

BUCKET = "tfr-emulated"
RUNNER = "--runner=FnApiRunner"


@pytest.fixture(scope="module")
def emulator():
  """The emulator on a free loopback port, in memory, with one bucket; stopped afterwards."""
  with gcs_emulator.running(BUCKET) as url:
    yield url


def _upload(local_root: str, gs_root: str) -> int:
  count = 0
  for d, _, files in os.walk(local_root):
    for f in files:
      src = os.path.join(d, f)
      rel = os.path.relpath(src, local_root).replace(os.sep, "/")
      with open(src, "rb") as fin, FileSystems.create(f"{gs_root}/{rel}") as fout:
        fout.write(fin.read())
      count += 1
  return count


def _read_tree(root: str):
  """{relative name: bytes} of every object/file under root (local or gs://)."""
  sep = "/" if root.startswith("gs://") else os.sep
  found = FileSystems.match([root.rstrip("/") + sep + "**"])[0].metadata_list
  result = {}
  for meta in found:
    rel = meta.path[len(root.rstrip("/")) + 1:].replace(os.sep, "/")
    with FileSystems.open(meta.path, compression_type="uncompressed") as f:
      result[rel] = f.read()
  return result


def _normalized_manifest(data: bytes, root: str):
  manifest = json.loads(data)
  for key in ("created", "args", "config", "source_fingerprint", "run_id"):
    manifest.pop(key, None)
  return json.loads(json.dumps(manifest).replace(root, "ROOT"))


def _convert(data: str, out: str, *extra: str) -> int:
  return cli.main(["convert", "--format", "coco",
                   "--input", f"train={data}/instances_train.json",
                   "--input", f"val={data}/instances_val.json",
                   "--images", f"{data}/images", "--output", out, "--num-shards", "2",
                   RUNNER, *extra])


def test_gs_to_gs_equals_local(emulator, tmp_path, capsys):
  local = str(tmp_path / "data")
  images = sample.make_dataset(local, count=12)
  gs_data = f"gs://{BUCKET}/datasets/sample"
  assert _upload(local, gs_data) == len(os.listdir(os.path.join(local, "images"))) + len(
      [f for f in os.listdir(local) if f.endswith((".json", ".csv"))]) + sum(
      len(fs) for d, _, fs in os.walk(os.path.join(local, "voc")))

  local_out = str(tmp_path / "out")
  gs_out = f"gs://{BUCKET}/tfrecords/sample"
  assert _convert(local, local_out) == 0
  assert _convert(gs_data, gs_out, "--if-changed") == 0

  want, got = _read_tree(local_out), _read_tree(gs_out)
  assert sorted(got) == sorted(want), (sorted(got), sorted(want))
  assert any(n.endswith(".tfrecord") for n in got) and "label_map.pbtxt" in got
  assert not [n for n in got if n.startswith(".tmp")], "staging left behind"
  for name in want:
    if name == "manifest.json":
      assert _normalized_manifest(got[name], gs_data) == _normalized_manifest(want[name], local)
    elif name == "README.md":  # when, where and how differ; the card renders its manifest
      assert got[name].decode() == card.render(json.loads(got["manifest.json"])), name
    elif name.startswith("errors-"):
      assert got[name].decode().replace(gs_data, "ROOT") == \
          want[name].decode().replace(local, "ROOT"), name
    else:
      assert got[name] == want[name], f"{name} differs between gs:// and local"
  manifest = json.loads(got["manifest.json"])
  assert manifest["totals"]["examples"] == len(images)
  assert manifest["source_fingerprint"]["files"] >= len(images) + 2

  # `verify` reads shards through TensorFlow's filesystem, not Beam's, so it checks the local
  # twin; the gs:// output equals it byte for byte.
  assert cli.main(["verify", local_out]) == 0

  # --writer-processes N asked for explicitly is used for gs:// too: the writers read and
  # write through Beam's GCS filesystem (the emulator's address comes with the environment)
  writers = f"gs://{BUCKET}/tfrecords/writers"
  assert _convert(gs_data, writers, "--writer-processes", "2") == 0
  written = _read_tree(writers)
  shards = sorted(n for n in want if n.endswith(".tfrecord"))
  assert shards and [written[n] for n in shards] == [want[n] for n in shards]

  # --if-changed on gs://: listing through FileSystems.match sees nothing new -> skipped;
  # an image re-uploaded (new size and update time) -> converted again.
  capsys.readouterr()
  assert _convert(gs_data, gs_out, "--if-changed") == 0
  assert "skipped" in capsys.readouterr().out
  first = images[0].file_name
  with open(os.path.join(local, "images", first), "rb") as f:
    data = f.read()
  with FileSystems.create(f"{gs_data}/images/{first}") as f:
    f.write(data + b"\0")  # trailing bytes after the image's end: same pixels, new size
  assert _convert(gs_data, gs_out, "--if-changed") == 0
  out = capsys.readouterr().out
  assert "skipped" not in out
  again = json.loads(_read_tree(gs_out)["manifest.json"])
  assert again["source_fingerprint"]["sha256"] != manifest["source_fingerprint"]["sha256"]


@pytest.fixture(scope="module")
def gs_output(emulator, tmp_path_factory):
  """A small dataset uploaded to gs:// and its conversion there, made once for the module;
  (data, output, the victim object beside it). A test that edits the output puts it back."""
  local = str(tmp_path_factory.mktemp("gs_output") / "data")
  sample.make_dataset(local, count=6)
  gs_data = f"gs://{BUCKET}/datasets/keep"
  _upload(local, gs_data)
  gs_out = f"gs://{BUCKET}/tfrecords/keep"
  victim = f"gs://{BUCKET}/tfrecords/victim"
  with FileSystems.create(victim) as f:
    f.write(b"not the tool's")
  assert _convert(gs_data, gs_out) == 0
  return gs_data, gs_out, victim


def test_gs_output_survives_an_empty_run_and_a_held_lock(gs_output, capsys):
  """On gs:// too, a run that writes nothing leaves the earlier output as it was, and a
  second writer is turned away by the lock object."""
  from beam_tfrecord.finalize import lock
  from beam_tfrecord.finalize import output as outputs
  gs_data, gs_out, _ = gs_output
  before = _read_tree(gs_out)
  code = cli.main(["convert", "--format", "coco", "--input",
                   f"train={gs_data}/instances_train.json", "--images",
                   f"{gs_data}/no-such-images", "--output", gs_out, "--overwrite", RUNNER])
  assert code == 4
  after = _read_tree(gs_out)
  assert {k: v for k, v in after.items() if not k.startswith(outputs.OWN_PREFIX)} == before
  assert not [k for k in after if k == outputs.LOCK]
  capsys.readouterr()
  with lock.OutputLock(gs_out, "other-run"):
    assert _convert(gs_data, gs_out, "--overwrite") == 2
    assert "locked by run other-run" in capsys.readouterr().err
  assert _read_tree(gs_out)["manifest.json"] == before["manifest.json"]


def test_gs_manifest_listing_names_outside_the_output_deletes_nothing(gs_output, capsys):
  """The ownership check holds on gs:// too: a manifest whose 'files' has a '../', an absolute
  or an empty entry is refused (exit 2) before anything is deleted."""
  gs_data, gs_out, victim = gs_output
  original = _read_tree(gs_out)["manifest.json"]
  manifest = json.loads(original)
  try:
    for entry in ("../victim", victim, "", "a/b"):
      edited = dict(manifest, files=manifest["files"] + [entry])
      with FileSystems.create(f"{gs_out}/manifest.json") as f:
        f.write(json.dumps(edited).encode())
      before = _read_tree(f"gs://{BUCKET}/tfrecords")
      capsys.readouterr()
      assert _convert(gs_data, gs_out, "--overwrite") == 2, entry
      err = capsys.readouterr().err
      assert "plain names" in err and len(err.strip().splitlines()) == 1, err
      assert _read_tree(f"gs://{BUCKET}/tfrecords") == before, entry
  finally:
    with FileSystems.create(f"{gs_out}/manifest.json") as f:
      f.write(original)


def test_gs_reads_are_whole_objects_or_errors(emulator):
  """encode.read_bytes on gs://: one download per object, the same bytes as Beam's own read;
  an object over the limit is rejected from its known size without reading, or from at most
  limit + 1 bytes when the size is unknown; a missing object is `unreadable`."""
  from beam_tfrecord.records.model import InputError
  from beam_tfrecord.write import encode
  data = os.urandom(5000)
  uri = f"gs://{BUCKET}/reads/blob.bin"
  with FileSystems.create(uri) as f:
    f.write(data)
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    assert f.read() == data
  assert encode.read_bytes(uri) == data
  assert encode.read_bytes(uri, size=len(data)) == data
  assert encode.fetch(uri, 10_000, len(data))[0] == data
  for size, says in ((None, "more than 4999 bytes"), (len(data), "has 5000 bytes")):
    with pytest.raises(InputError) as e:
      encode.read_bytes(uri, limit=4999, size=size)
    assert e.value.reason == "image_too_large" and says in e.value.message
  with pytest.raises(InputError) as e:
    encode.read_bytes(f"gs://{BUCKET}/reads/missing.bin")
  assert e.value.reason == "unreadable" and "missing.bin" in e.value.message


def test_gs_listing_is_one_level_and_cached(emulator, monkeypatch):
  """storage.files.list_dir on gs:// asks for one level (the client's delimiter listing), not
  everything below the prefix, gives what a local listing gives, and asks once per run."""
  from beam_tfrecord.storage import files, gcs
  root = f"gs://{BUCKET}/listing"
  for name in ("a.json", "b.txt", "train/x.jpg", "train/deep/y.jpg", "valid/z.jpg"):
    with FileSystems.create(f"{root}/{name}") as f:
      f.write(b"1")
  client = gcs.client()
  calls = []
  real = client.list_blobs

  def counted(*args, **kwargs):
    calls.append(kwargs)
    return real(*args, **kwargs)

  monkeypatch.setattr(client, "list_blobs", counted)
  files.forget_listings()
  assert files.list_dir(root) == (["train", "valid"], ["a.json", "b.txt"])
  assert files.list_dir(root + "/") == (["train", "valid"], ["a.json", "b.txt"])
  assert files.list_dir(f"{root}/train") == (["deep"], ["x.jpg"])
  assert files.is_dir(f"{root}/valid") and not files.is_dir(f"{root}/missing")
  assert [c["delimiter"] for c in calls] == ["/"] * len(calls)
  assert len(calls) == 4  # root, train, valid, missing: each once
  files.forget_listings()
  files.list_dir(root)
  assert len(calls) == 5  # a new run lists again


def test_no_credentials_is_one_line_at_once(tmp_path):
  """Without Application Default Credentials, one lookup decides and one line says what is
  missing; Beam then connects anonymously without a lookup of its own (it retried with backoff
  for ~30 s without a word). What is checked is what happens, not how long it takes: one
  google.auth.default() call in all, and no network connection at all, so no wait on a
  metadata server (NO_GCE_CHECK=true, as google-auth spells it, says this is no GCE machine;
  "True" was not read as such, and each run waited on 169.254.169.254)."""
  code = ("import json, sys\n"
          "network = []\n"
          "def audit(event, args):\n"
          "  if event == 'socket.connect':\n"
          "    network.append(repr(args[1]))\n"
          "  elif event == 'socket.getaddrinfo':\n"
          "    network.append(repr(args[0]))\n"
          "sys.addaudithook(audit)\n"
          "import google.auth\n"
          "lookups, default = [], google.auth.default\n"
          "google.auth.default = lambda *a, **k: lookups.append(a) or default(*a, **k)\n"
          "from beam_tfrecord.storage import gcs\n"
          "found = gcs.check_credentials()\n"
          "from apache_beam.internal.gcp import auth\n"
          "from apache_beam.options.pipeline_options import PipelineOptions\n"
          "creds = auth._Credentials.get_service_credentials(PipelineOptions([]))\n"
          "print(json.dumps([found, repr(creds), len(lookups), network]))\n")
  env = {k: v for k, v in os.environ.items()
         if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
  env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="true")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)  # bounds a hang only
  assert result.returncode == 0, result.stderr[-2000:]
  found, creds, lookups, network = json.loads(result.stdout.splitlines()[-1])
  assert (found, creds, lookups, network) == (False, "None", 1, [])
  lines = [l for l in result.stderr.splitlines() if l.startswith("beam-tfrecord:")]
  from beam_tfrecord.storage import gcs
  assert lines == [f"beam-tfrecord: {gcs.NO_CREDENTIALS}"]


def test_with_an_emulator_beam_connects_anonymously_without_a_lookup(tmp_path):
  """An emulator takes no credentials: check_credentials tells Beam so at once, and so does
  the Cloud Storage client on its first use in a process that never ran the CLI (an engine's
  SDK worker, which the emulator's address reaches through deploy/engines/convert-on.sh: each
  waited out Beam's ~30 s lookup). No google.auth.default() call, no network, no line."""
  code = ("import json, sys\n"
          "network = []\n"
          "def audit(event, args):\n"
          "  if event == 'socket.connect':\n"
          "    network.append(repr(args[1]))\n"
          "sys.addaudithook(audit)\n"
          "import google.auth\n"
          "lookups, default = [], google.auth.default\n"
          "google.auth.default = lambda *a, **k: lookups.append(a) or default(*a, **k)\n"
          "from beam_tfrecord.storage import gcs\n"
          "gcs.client()\n"
          "from apache_beam.internal.gcp import auth\n"
          "from apache_beam.options.pipeline_options import PipelineOptions\n"
          "creds = auth._Credentials.get_service_credentials(PipelineOptions([]))\n"
          "print(json.dumps([gcs.check_credentials(), repr(creds), len(lookups), network]))\n")
  env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
  env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="true",
             STORAGE_EMULATOR_HOST="http://127.0.0.1:9")  # nothing listens: never asked
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)  # bounds a hang only
  assert result.returncode == 0, result.stderr[-2000:]
  assert json.loads(result.stdout.splitlines()[-1]) == [True, "None", 0, []]
  assert "beam-tfrecord:" not in result.stderr


def test_a_runs_scratch_on_gs_is_removed_and_nothing_else(emulator):
  """Runners other than the local ones write the plan's sorted runs into the run directory
  (gs:// on Dataflow): Finalize removes them (output.remove_work), and only them."""
  from beam_tfrecord.finalize import output as outputs
  run = outputs.run_dir(f"gs://{BUCKET}/scratch-out", "r1")
  names = [f"{run}/.work/run-train-00000", f"{run}/.work/run-val-00003",
           f"{run}/train-00000-of-00001.tfrecord"]
  for name in names:
    with FileSystems.create(name) as f:
      f.write(b"x")
  outputs.remove_work(run, "r1")
  assert [FileSystems.exists(n) for n in names] == [False, False, True]

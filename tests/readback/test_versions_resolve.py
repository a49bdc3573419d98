"""Readers given a versioned output (DEST/LATEST, DEST/versions/<V>/): reader.load,
shard_files and show, and the verify, inspect and show commands read the version LATEST
names, resolved once (a LATEST moved mid-read mixes nothing), and the commands name it. A
damaged LATEST (a symlink, a FIFO, junk, a missing or linked version, a linked versions/) is
DamagedVersions from the API and one line with exit 2 from the commands. A version directory
and an ordinary output are read as before.

The versioned outputs are made by hand: the shared real COCO conversion (conftest's
coco_output) copied to DEST/versions/00000001 with LATEST written, and for the damaged
layouts a hand-written output (handmade_outputs), which needs no pipeline run."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from handmade_outputs import LABELS, SCHEMAS

from beam_tfrecord import cli, reader
from beam_tfrecord.readback import show as shows
from beam_tfrecord.readback import stats, verify
from beam_tfrecord.records import label_map
from beam_tfrecord.storage import layout, record_files, versions
from beam_tfrecord.storage.versions import DamagedVersions

V1 = "versions/00000001"


def make_versioned(dest: Path, *outputs: Path, latest: int = 1) -> Path:
  """DEST with each output copied to versions/0000000<i> (from 1) and LATEST naming `latest`,
  as an append run leaves it."""
  for number, output in enumerate(outputs, start=1):
    shutil.copytree(output, versions.version_dir(str(dest), number))
  (dest / "LATEST").write_bytes(versions.latest_text(latest))
  return dest


def hand_made(root: Path) -> Path:
  """A hand-written od_api output (one record) that verify passes: with its label map."""
  output = SCHEMAS["od_api"](root)
  (output / layout.LABEL_MAP).write_text(label_map.to_text(LABELS), encoding="utf-8")
  return output


def point_latest(dest: Path, number: int) -> None:
  """Publish another version as a run does: a new LATEST renamed over the old one."""
  (dest / "LATEST.tmp").write_bytes(versions.latest_text(number))
  os.replace(dest / "LATEST.tmp", dest / "LATEST")


def records(output: str, split: str):
  """Every record of a split through reader.load, as comparable Python values."""
  return [_values(example) for example in reader.load(output, split)]


def _values(example):
  return {k: v.numpy().tolist() if v.shape.rank else v.numpy() for k, v in example.items()}


@pytest.fixture
def versioned(tmp_path, coco_output) -> Path:
  """The real COCO conversion as the one version of a versioned output."""
  return make_versioned(tmp_path / "dest", coco_output)


@pytest.fixture
def no_hang():
  """Fail, rather than hang, when a read blocks (opening a FIFO without O_NONBLOCK)."""
  def blocked(*_):
    raise TimeoutError("blocked: LATEST was opened as a FIFO would block")
  old = signal.signal(signal.SIGALRM, blocked)
  signal.alarm(60)
  yield
  signal.alarm(0)
  signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------------
# Reading DEST reads LATEST's version
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_load_dest_reads_the_same_records_as_the_version(versioned, coco_output):
  version = str(versioned / V1)
  manifest = json.loads((coco_output / "manifest.json").read_text())
  assert sorted(manifest["splits"]) == ["train", "val"]
  for split in manifest["splits"]:
    from_dest = records(str(versioned), split)
    assert from_dest and from_dest == records(version, split)
    assert from_dest == records(str(coco_output), split)  # the ordinary output, as before
    names = [s["path"] for s in manifest["splits"][split]["shards"]]
    assert reader.shard_files(str(versioned), split) == [os.path.join(version, n)
                                                         for n in names]
    assert reader.shard_files(version, split) == [os.path.join(version, n) for n in names]


@pytest.mark.e2e
def test_commands_on_dest_name_the_version(versioned, tmp_path, capsys):
  dest, version = str(versioned), str(versioned / V1)
  assert cli.main(["verify", dest]) == 0
  lines = capsys.readouterr().out.splitlines()
  total = len(records(version, "train")) + len(records(version, "val"))
  assert lines == [f"verify: {dest} -> {V1}: {total} examples parsed with TensorFlow: OK"]

  assert cli.main(["inspect", dest]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == "status: ok" and lines[1] == f"version: {dest} -> {V1}"
  assert "per class:" in lines
  assert cli.main(["inspect", dest, "--json"]) == 0
  doc = json.loads(capsys.readouterr().out)
  assert doc["output"] == dest and doc["version"] == V1 and doc["records_match_manifest"]

  picture = tmp_path / "grid.png"
  assert cli.main(["show", dest, "-n", "4", "--output", str(picture)]) == 0
  assert capsys.readouterr().out == f"{picture}: 4 examples of {dest} -> {V1}\n"
  grid = reader.show(dest, n=4)
  assert grid.info["version"] == 1 and grid.info["read"] == version
  assert [t["name"] for t in grid.info["tiles"]] == \
      [t["name"] for t in reader.show(version, n=4).info["tiles"]]


@pytest.mark.e2e
def test_version_dir_and_ordinary_output_are_read_as_before(versioned, coco_output, tmp_path,
                                                            capsys):
  picture = tmp_path / "grid.png"
  for path in (str(versioned / V1), str(coco_output)):
    assert cli.main(["verify", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verify: ") and "->" not in out and out.rstrip().endswith(": OK")
    assert cli.main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "status: ok" and "version:" not in out
    assert cli.main(["inspect", path, "--json"]) == 0
    assert "version" not in json.loads(capsys.readouterr().out)
    assert cli.main(["show", path, "-n", "2", "--output", str(picture)]) == 0
    assert capsys.readouterr().out == f"{picture}: 2 examples of {path}\n"
    assert reader.show(path, n=2).info["version"] is None


# ---------------------------------------------------------------------------------------------
# LATEST is resolved once: a version published mid-read mixes nothing
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def two_versions(tmp_path, coco_output) -> Path:
  """versions/00000001 the COCO conversion (LATEST), versions/00000002 another dataset."""
  other = hand_made(tmp_path / "other")
  return make_versioned(tmp_path / "dest", coco_output, other, latest=1)


@pytest.mark.e2e
def test_load_keeps_the_version_it_resolved(two_versions):
  dest = str(two_versions)
  want = records(str(two_versions / V1), "train")
  dataset = reader.load(dest, "train")
  point_latest(two_versions, 2)  # a run publishes version 2 before the records are read
  got = [_values(example) for example in dataset]
  assert got == want
  assert records(dest, "train") == records(str(two_versions / "versions/00000002"), "train")


@pytest.mark.e2e
def test_commands_keep_the_version_they_resolved(two_versions, tmp_path, monkeypatch, capsys):
  """LATEST moves to version 2 as the first shard is read: every shard read is version 1's."""
  dest = two_versions
  opened = []

  def moving(read):
    def wrapped(uri, *args, **kwargs):
      opened.append(str(uri))
      point_latest(dest, 2)
      return read(uri, *args, **kwargs)
    return wrapped

  monkeypatch.setattr(record_files, "read_records", moving(record_files.read_records))
  monkeypatch.setattr(verify, "_check_shard", moving(verify._check_shard))
  for command in (["verify", str(dest)], ["inspect", str(dest)],
                  ["show", str(dest), "-n", "30", "--output", str(tmp_path / "grid.png")]):
    point_latest(dest, 1)
    opened.clear()
    assert cli.main(command) == 0, command
    out = capsys.readouterr().out
    assert f"{dest} -> {V1}" in out, (command, out)
    assert opened and all(u.startswith(str(dest / V1) + os.sep) for u in opened), opened
  point_latest(dest, 1)
  opened.clear()
  assert shows.show(str(dest), n=30).info["version"] == 1
  assert opened and all(u.startswith(str(dest / V1) + os.sep) for u in opened), opened


# ---------------------------------------------------------------------------------------------
# verify --repair on DEST
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_verify_repair_on_dest_changes_nothing(versioned, capsys):
  before = sorted(str(p.relative_to(versioned)) for p in versioned.rglob("*"))
  assert cli.main(["verify", "--repair", str(versioned)]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0] == (f"verify: {versioned} is a versioned output: nothing to repair (a "
                    "published version is never changed)")
  assert out[-1].startswith(f"verify: {versioned} -> {V1}: ") and out[-1].endswith(": OK")
  assert sorted(str(p.relative_to(versioned)) for p in versioned.rglob("*")) == before


def test_verify_repair_on_dest_repairs_a_version_with_a_journal(tmp_path, monkeypatch, capsys):
  dest = make_versioned(tmp_path / "dest", hand_made(tmp_path / "od"))
  version = dest / V1
  # a journal as a run writes it (one naming no run directory is refused as forged)
  (version / layout.JOURNAL).write_text(json.dumps({
      "run_id": "r1", "run_dir": f"{layout.RUN_PREFIX}r1", "files": [], "old_files": []}))
  # without --repair: the pending replacement is the problem reported
  assert cli.main(["verify", str(dest)]) == 1
  out = capsys.readouterr().out
  assert "a run (r1) was interrupted" in out and f"{dest} -> {V1}: 0 examples" in out
  repaired = []

  def repair(output, break_lock=False):
    repaired.append(output)
    (Path(output) / layout.JOURNAL).unlink()
    return "completed the interrupted replacement by run r1 (0 files)"

  monkeypatch.setattr(verify, "repair_output", repair)
  assert cli.main(["verify", "--repair", str(dest)]) == 0
  out = capsys.readouterr().out.splitlines()
  assert repaired == [str(version)]
  assert out[0] == "verify: completed the interrupted replacement by run r1 (0 files)"
  assert out[-1] == f"verify: {dest} -> {V1}: 1 examples parsed with TensorFlow: OK"


def test_versions_without_latest_say_nothing_is_published(tmp_path, capsys):
  dest = tmp_path / "dest"
  shutil.copytree(hand_made(tmp_path / "od"), versions.version_dir(str(dest), 1))
  assert cli.main(["verify", str(dest)]) == 1
  out = capsys.readouterr().out
  assert "no readable manifest.json" in out and "no LATEST: no version is published" in out


# ---------------------------------------------------------------------------------------------
# A damaged LATEST: DamagedVersions from the API, one line and exit 2 from the commands
# ---------------------------------------------------------------------------------------------

DAMAGES = ["latest symlink", "latest fifo", "latest directory", "junk", "bad digits",
           "two lines", "missing version", "versions symlink", "version symlink",
           "versions symlink, no latest"]


def damage(dest: Path, how: str, elsewhere: Path) -> None:
  """Break DEST (one sound version, LATEST naming it) the way `how` says. The links point at
  a sound copy, so only the link itself is wrong."""
  latest = dest / "LATEST"
  shutil.copytree(dest / "versions", elsewhere / "versions")
  if how == "latest symlink":
    (elsewhere / "LATEST").write_bytes(latest.read_bytes())
    latest.unlink()
    latest.symlink_to(elsewhere / "LATEST")
  elif how == "latest fifo":
    latest.unlink()
    os.mkfifo(latest)  # no writer: opening it must not block
  elif how == "latest directory":
    latest.unlink()
    latest.mkdir()
  elif how == "junk":
    latest.write_bytes(b"\x89PNG\r\n\x1a\n")
  elif how == "bad digits":
    latest.write_bytes(b"versions/1\n")
  elif how == "two lines":
    latest.write_bytes(b"versions/00000001\nversions/00000001\n")
  elif how == "missing version":
    latest.write_bytes(versions.latest_text(2))
  elif how.startswith("versions symlink"):
    shutil.rmtree(dest / "versions")
    (dest / "versions").symlink_to(elsewhere / "versions")
    if how.endswith("no latest"):
      latest.unlink()
  elif how == "version symlink":
    shutil.rmtree(dest / V1)
    (dest / V1).symlink_to(elsewhere / V1)
  else:
    raise AssertionError(how)


@pytest.fixture
def sound(tmp_path) -> Path:
  """A hand-written output as the one version of DEST (no pipeline run needed)."""
  return make_versioned(tmp_path / "dest", hand_made(tmp_path / "od"))


def test_sound_hand_made_dest_reads(sound, capsys):
  assert versions.locate(str(sound)) == (str(sound / V1), 1)
  assert records(str(sound), "train") == records(str(sound / V1), "train")
  assert len(records(str(sound), "train")) == 1
  assert cli.main(["verify", str(sound)]) == 0
  assert capsys.readouterr().out == \
      f"verify: {sound} -> {V1}: 1 examples parsed with TensorFlow: OK\n"


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_latest_is_one_line_and_exit_2(sound, tmp_path, how, capsys, no_hang):
  damage(sound, how, tmp_path / "elsewhere")
  capsys.readouterr()
  picture = tmp_path / "grid.png"
  for command in (["verify", str(sound)], ["verify", "--repair", str(sound)],
                  ["inspect", str(sound)], ["inspect", "--json", str(sound)],
                  ["show", str(sound), "--output", str(picture)]):
    assert cli.main(command) == 2, command
    captured = capsys.readouterr()
    assert captured.out == "", (command, captured.out)
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith("beam-tfrecord: error: "), (command, err)
    assert str(sound) in err[0] and "Traceback" not in captured.err
  assert not picture.exists()
  assert not (sound / layout.LOCK).exists() and not (sound / V1 / layout.LOCK).exists()


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_latest_raises_from_the_api(sound, tmp_path, how, no_hang):
  damage(sound, how, tmp_path / "elsewhere")
  dest = str(sound)
  calls = [lambda: reader.load(dest, "train"), lambda: reader.shard_files(dest, "train"),
           lambda: reader.show(dest, n=2), lambda: shows.show(dest, n=2),
           lambda: verify.check(dest), lambda: verify.check(dest, repair=True),
           lambda: versions.resolve(dest), lambda: versions.read_latest(dest)]
  for call in calls:
    with pytest.raises(DamagedVersions):
      call()
  # the version directory itself is still an ordinary output, read as before
  if how not in ("missing version", "version symlink") and not how.startswith("versions"):
    assert len(records(str(sound / V1), "train")) == 1
    assert verify.check(str(sound / V1))[1] == []


def test_inspect_command_of_a_damaged_dest_is_a_usage_error(sound, tmp_path):
  from beam_tfrecord.errors import UsageError
  damage(sound, "junk", tmp_path / "elsewhere")
  with pytest.raises(UsageError, match="LATEST is not text"):
    stats.inspect_command(str(sound))

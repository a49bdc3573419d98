"""storage/versions.py: the names of a versioned output (DEST/LATEST, DEST/versions/<V>),
LATEST parsed without trusting it, version numbers listed without foreign names, and
split_version. Reading damaged layouts through the readers and commands is in
tests/readback/test_versions_resolve.py."""
from __future__ import annotations

import os
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_tfrecord.storage import versions
from beam_tfrecord.storage.versions import DamagedVersions

# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("number,name", [(0, "00000000"), (1, "00000001"),
                                         (12345678, "12345678"), (99999999, "99999999")])
def test_version_name_is_eight_digits(number, name):
  assert versions.version_name(number) == name
  assert versions.label(number) == f"versions/{name}"
  assert versions.latest_text(number) == f"versions/{name}\n".encode()
  assert versions.is_version_name(name)


def test_version_dir_and_split_version_are_inverse(tmp_path):
  dest = str(tmp_path / "dest")
  path = versions.version_dir(dest, 3)
  assert path == os.path.join(dest, "versions", "00000003")
  assert versions.split_version(path) == (dest, 3)
  assert versions.split_version(path + "/") == (dest, 3)
  remote = versions.version_dir("gs://bucket/dest", 7)
  assert remote == "gs://bucket/dest/versions/00000007"
  assert versions.split_version(remote) == ("gs://bucket/dest", 7)
  assert versions.split_version(remote + "/") == ("gs://bucket/dest", 7)


@pytest.mark.parametrize("path", [
    "/data/out", "/data/out/", "/data/versions", "/data/versions/", "/data/out/00000003",
    "/data/other/00000003", "/data/versions/0000003", "/data/versions/000000003",
    "/data/versions/20260101T030000Z", "/data/versions/0000000²", "/data/versions/٠٠٠٠٠٠٠٣",
    "/data/versions/00000003/train", "gs://bucket", "gs://bucket/versions/latest", "", "/",
    "00000003"])
def test_split_version_leaves_other_paths(path):
  assert versions.split_version(path) == (path, None)


def test_split_version_of_a_relative_version_dir():
  assert versions.split_version("versions/00000002") == (".", 2)
  assert versions.split_version("out/versions/00000002") == ("out", 2)


# ---------------------------------------------------------------------------------------------
# LATEST's text
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("data,number", [(b"versions/00000003\n", 3),
                                         (b"versions/00000003", 3),
                                         (b"versions/12345678\n", 12345678)])
def test_parse_latest_reads_what_we_write(data, number):
  assert versions.parse_latest(data) == number


@given(st.integers(min_value=0, max_value=10 ** 8 - 1))
def test_parse_latest_of_latest_text_round_trips(number):
  assert versions.parse_latest(versions.latest_text(number)) == number


@pytest.mark.parametrize("data", [
    b"", b"\n", b"versions/3\n", b"versions/0000003\n", b"versions/000000003\n",
    b"versions/00000003\n\n", b"versions/00000003\r\n", b"versions/00000003 \n",
    b" versions/00000003\n", b"versions/00000003\nversions/00000004\n",
    b"versions/0000000a\n", b"./versions/00000003\n", b"../versions/00000003\n",
    b"/versions/00000003\n", b"versions//00000003\n", b"Versions/00000003\n",
    b"versions/00000003/\n", b"00000003\n", b"\xff\xfe", b"versions/\x00000003\n",
    "versions/0000000٣\n".encode("utf-8"), b"versions/00000003" + b"\n" * 5000])
def test_parse_latest_refuses_anything_else(data):
  with pytest.raises(DamagedVersions):
    versions.parse_latest(data)


def test_damaged_versions_is_a_value_error():
  assert issubclass(DamagedVersions, ValueError)


# ---------------------------------------------------------------------------------------------
# Version numbers on disk
# ---------------------------------------------------------------------------------------------


def test_numbers_ignore_foreign_names(tmp_path):
  root = tmp_path / "dest" / "versions"
  for name in ("00000001", "00000003", "00000010",            # ours
               "0000002", "000000004", "20260101T030000Z",   # too short, too long, dated
               ".inprogress-00000005", "0000000a", "٠٠٠٠٠٠٠٦", "0000000²"):
    (root / name).mkdir(parents=True)
  (root / "00000007").write_text("a file, not a version")
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (root / "00000008").symlink_to(elsewhere)  # a link is never one of our versions
  assert versions.numbers(str(tmp_path / "dest")) == [1, 3, 10]


def test_numbers_of_a_dest_without_versions(tmp_path):
  assert versions.numbers(str(tmp_path)) == []
  assert versions.numbers(str(tmp_path / "missing")) == []
  (tmp_path / "file").write_text("x")
  assert versions.numbers(str(tmp_path / "file")) == []


def test_numbers_refuse_a_versions_folder_that_is_a_link(tmp_path):
  elsewhere = tmp_path / "elsewhere"
  (elsewhere / "00000001").mkdir(parents=True)
  dest = tmp_path / "dest"
  dest.mkdir()
  (dest / "versions").symlink_to(elsewhere)
  with pytest.raises(DamagedVersions, match="link"):
    versions.numbers(str(dest))


# ---------------------------------------------------------------------------------------------
# read_latest, resolve, locate on local directories
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def no_hang():
  """Fail, rather than hang, when a read blocks (opening a FIFO without O_NONBLOCK)."""
  def blocked(*_):
    raise TimeoutError("blocked: LATEST was opened as a FIFO would block")
  old = signal.signal(signal.SIGALRM, blocked)
  signal.alarm(30)
  yield
  signal.alarm(0)
  signal.signal(signal.SIGALRM, old)


def _versioned(tmp_path, *numbers, latest=None):
  dest = tmp_path / "dest"
  for n in numbers:
    (dest / "versions" / versions.version_name(n)).mkdir(parents=True)
  if latest is not None:
    (dest / "LATEST").write_bytes(versions.latest_text(latest))
  return dest


def test_read_latest_and_resolve(tmp_path):
  dest = _versioned(tmp_path, 1, 2, latest=2)
  assert versions.read_latest(str(dest)) == 2
  assert versions.is_versioned(str(dest))
  v2 = versions.version_dir(str(dest), 2)
  assert versions.resolve(str(dest)) == v2
  assert versions.locate(str(dest)) == (v2, 2)
  # a version directory, an ordinary output, a missing path, a file: read as they are
  for path in (v2, str(tmp_path), str(tmp_path / "missing")):
    assert versions.read_latest(path) is None
    assert versions.resolve(path) == path and versions.locate(path) == (path, None)
  (tmp_path / "file").write_text("x")
  assert versions.resolve(str(tmp_path / "file")) == str(tmp_path / "file")
  assert not versions.is_versioned(str(tmp_path / "file"))
  assert not versions.is_versioned(v2)


def test_versions_without_latest_is_versioned_but_resolves_to_itself(tmp_path):
  dest = _versioned(tmp_path, 1)
  assert versions.is_versioned(str(dest))
  assert versions.read_latest(str(dest)) is None
  assert versions.resolve(str(dest)) == str(dest)


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_read_latest_refuses_a_linked_versions_folder_before_anything_is_published(tmp_path,
                                                                                   kind):
  """No LATEST yet, versions/ a link elsewhere (or a file): refused, so that a first append
  never lists or writes through it, and readers say why."""
  elsewhere = tmp_path / "elsewhere"
  (elsewhere / "00000001").mkdir(parents=True)
  dest = tmp_path / "dest"
  dest.mkdir()
  if kind == "symlink":
    (dest / "versions").symlink_to(elsewhere)
  else:
    (dest / "versions").write_text("x")
  for read in (versions.read_latest, versions.resolve, versions.locate):
    with pytest.raises(DamagedVersions, match="versions folder"):
      read(str(dest))


@pytest.mark.parametrize("damage", ["symlink", "fifo", "directory", "junk", "missing version",
                                    "versions symlink", "version symlink", "version file"])
def test_read_latest_refuses_damage(tmp_path, damage, no_hang):
  dest = _versioned(tmp_path, 1, latest=1)
  latest = dest / "LATEST"
  elsewhere = tmp_path / "elsewhere"
  (elsewhere / "versions" / "00000001").mkdir(parents=True)
  if damage == "symlink":
    latest.rename(tmp_path / "real-latest")
    latest.symlink_to(tmp_path / "real-latest")
  elif damage == "fifo":
    latest.unlink()
    os.mkfifo(latest)  # no writer: opening it must not block
  elif damage == "directory":
    latest.unlink()
    latest.mkdir()
  elif damage == "junk":
    latest.write_bytes(b"versions/1\n")
  elif damage == "missing version":
    latest.write_bytes(versions.latest_text(9))
  elif damage == "versions symlink":
    (dest / "versions" / "00000001").rmdir()
    (dest / "versions").rmdir()
    (dest / "versions").symlink_to(elsewhere / "versions")
  elif damage == "version symlink":
    (dest / "versions" / "00000001").rmdir()
    (dest / "versions" / "00000001").symlink_to(elsewhere / "versions" / "00000001")
  elif damage == "version file":
    (dest / "versions" / "00000001").rmdir()
    (dest / "versions" / "00000001").write_text("not a directory")
  for read in (versions.read_latest, versions.resolve, versions.locate):
    with pytest.raises(DamagedVersions) as e:
      read(str(dest))
    assert "\n" not in str(e.value)
    assert str(dest) in str(e.value)

"""storage/paths.py: file names from annotation files resolved safely inside an image root
(traversal, absolute paths, symlinks), property tests, and whole conversions: --follow-symlinks
and an image root that is a symlink repointed between runs."""
from __future__ import annotations

import os
import posixpath

import pytest
from bad_data import RUNNER, Coco, convert, jpeg
from fuzzing import FUZZ, returns_or_input_error
from hypothesis import example, given
from hypothesis import strategies as st

from beam_tfrecord.records.model import InputError
from beam_tfrecord.storage import paths


@pytest.mark.parametrize("name,expected", [
    ("a.jpg", "a.jpg"),
    ("sub/dir/a.jpg", "sub/dir/a.jpg"),
    ("sub\\dir\\a.jpg", "sub/dir/a.jpg"),
    ("./sub/./a.jpg", "sub/a.jpg"),
    ("sub/../a.jpg", "a.jpg"),
    ("grå ü.jpg", "grå ü.jpg"),
])
def test_clean_name_accepts_relative_names(name, expected):
  assert paths.clean_name(name) == expected


@pytest.mark.parametrize("name,reason", [
    ("../a.jpg", "path_traversal"),
    ("..", "path_traversal"),
    ("sub/../../a.jpg", "path_traversal"),
    ("..\\..\\windows\\a.jpg", "path_traversal"),
    ("/etc/passwd", "absolute_path"),
    ("\\\\server\\share\\a.jpg", "absolute_path"),
    ("C:/images/a.jpg", "absolute_path"),
    ("c:\\images\\a.jpg", "absolute_path"),
    ("gs://bucket/a.jpg", "absolute_path"),
    ("s3://bucket/a.jpg", "absolute_path"),
    ("file:///etc/passwd", "absolute_path"),
    ("a\x00.jpg", "unsafe_path"),
    ("", "missing_filename"),
    ("   ", "missing_filename"),
    (None, "missing_filename"),
    (17, "missing_filename"),
])
def test_clean_name_rejects_escapes(name, reason):
  with pytest.raises(InputError) as e:
    paths.clean_name(name)
  assert e.value.reason == reason


@pytest.mark.parametrize("name", ["manifest.json", "train-00000-of-00002.tfrecord",
                                  ".beam-tfrecord-run-1", "grå ü.rec", "run1:b", "...x"])
def test_plain_name_accepts_names_directly_inside(name):
  assert paths.plain_name(name) == name
  assert paths.child("gs://b/out", name) == f"gs://b/out/{name}"
  assert paths.child("/data/out", name) == f"/data/out/{name}"


@pytest.mark.parametrize("name", ["", ".", "..", "/abs", "../x", "a/b", "a\\b", "\\\\srv\\x",
                                  "a\x00b", "C:x", "c:\\x", "gs://b/x", None, 3, ["a"]])
def test_plain_name_refuses_what_could_leave_the_directory(name):
  """The names every delete, rename and write in an output goes through (manifest entries,
  the swap journal, formatted shard names)."""
  with pytest.raises(paths.UnsafeName):
    paths.plain_name(name)
  with pytest.raises(ValueError):
    paths.child("/data/out", name)


def test_resolve_inside_root(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "a.jpg").write_bytes(b"x")
  assert paths.resolve(str(tmp_path), "sub/a.jpg") == ("sub/a.jpg", str(tmp_path / "sub/a.jpg"))
  assert paths.resolve("gs://bucket/images", "sub/a.jpg") == \
      ("sub/a.jpg", "gs://bucket/images/sub/a.jpg")
  with pytest.raises(InputError) as e:
    paths.resolve("gs://bucket/images", "../other/a.jpg")
  assert e.value.reason == "path_traversal"


def test_resolve_rejects_symlink_pointing_outside(tmp_path):
  root, outside = tmp_path / "root", tmp_path / "outside"
  root.mkdir()
  outside.mkdir()
  (outside / "secret.jpg").write_bytes(b"secret")
  os.symlink(outside / "secret.jpg", root / "link.jpg")
  os.symlink(outside, root / "linkdir")
  for name in ("link.jpg", "linkdir/secret.jpg"):
    with pytest.raises(InputError) as e:
      paths.resolve(str(root), name)
    assert e.value.reason == "symlink_escape" and e.value.stage == "locate"


def test_resolve_allows_symlinks_inside_root_and_a_symlinked_root(tmp_path):
  real = tmp_path / "real"
  (real / "a").mkdir(parents=True)
  (real / "a" / "x.jpg").write_bytes(b"x")
  os.symlink(real / "a" / "x.jpg", real / "alias.jpg")
  os.symlink(real, tmp_path / "rootlink")
  assert paths.resolve(str(real), "alias.jpg")[0] == "alias.jpg"
  assert paths.resolve(str(tmp_path / "rootlink"), "a/x.jpg")[0] == "a/x.jpg"


def test_resolve_allow_absolute(tmp_path):
  assert paths.resolve(str(tmp_path), "gs://b/x.jpg", allow_absolute=True) == \
      ("gs://b/x.jpg", "gs://b/x.jpg")
  assert paths.resolve(str(tmp_path), "/data/x.jpg", allow_absolute=True) == \
      ("/data/x.jpg", "/data/x.jpg")
  with pytest.raises(InputError):
    paths.resolve(str(tmp_path), "/data/x.jpg")
  with pytest.raises(InputError):  # traversal stays forbidden even with allow_absolute
    paths.resolve(str(tmp_path), "../x.jpg", allow_absolute=True)


def test_file_size(tmp_path):
  (tmp_path / "a.jpg").write_bytes(b"12345")
  assert paths.file_size(str(tmp_path / "a.jpg")) == 5
  for uri in (str(tmp_path / "missing.jpg"), str(tmp_path)):
    with pytest.raises(InputError) as e:
      paths.file_size(uri)
    assert e.value.reason == "missing_image"


@pytest.mark.parametrize("text,expected", [
    ("train=data/a.json", ("train", "data/a.json")),
    ("val2017=/abs/a.json", ("val2017", "/abs/a.json")),
    ("data/a.json", (None, "data/a.json")),
    ("gs://bucket/a=b.json", (None, "gs://bucket/a=b.json")),
    ("my split=a.json", (None, "my split=a.json")),
])
def test_parse_assignment(text, expected):
  assert paths.parse_assignment(text) == expected


def test_resolve_matches_realpath_with_and_without_symlinks(tmp_path):
  """resolve walks only the key's own components when none is a symlink; wherever one is, or
  the file is missing, realpath decides, as before."""
  from beam_tfrecord.records.model import InputError
  from beam_tfrecord.storage import paths
  root, outside = tmp_path / "root", tmp_path / "outside"
  (root / "sub").mkdir(parents=True)
  outside.mkdir()
  (root / "sub" / "a.jpg").write_bytes(b"x")
  (outside / "b.jpg").write_bytes(b"y")
  (root / "inner").symlink_to(root / "sub")      # a link that stays inside the root
  (root / "away").symlink_to(outside)            # a link that leaves it
  assert paths.resolve(str(root), "sub/a.jpg") == ("sub/a.jpg", str(root / "sub" / "a.jpg"))
  assert paths.resolve(str(root), "inner/a.jpg") == ("inner/a.jpg", str(root / "inner" / "a.jpg"))
  assert paths.resolve(str(root), "sub/missing.jpg")[0] == "sub/missing.jpg"  # Locate reports
  # the size comes with the lstat of a plain path; Locate stats the others
  assert paths.resolve_sized(str(root), "sub/a.jpg")[2] == 1
  assert paths.resolve_sized(str(root), "inner/a.jpg")[2] is None
  assert paths.resolve_sized(str(root), "sub")[2] is None  # a directory: Locate rejects it
  assert paths.resolve_sized(str(root), "sub/missing.jpg")[2] is None
  with pytest.raises(InputError) as e:
    paths.resolve(str(root), "away/b.jpg")
  assert e.value.reason == "symlink_escape"
  assert paths.resolve(str(root), "away/b.jpg", follow_symlinks=True)[1] == str(root / "away/b.jpg")
  # a root that is itself a link is resolved once, and files under it are inside it
  (tmp_path / "link_root").symlink_to(root)
  assert paths.resolve(str(tmp_path / "link_root"), "sub/a.jpg")[0] == "sub/a.jpg"


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------


@FUZZ
@given(st.text(st.characters(blacklist_categories=()), max_size=40) | st.lists(st.sampled_from(["..", ".", "a", "", "/", "\\", "b c",
                                                         "C:", "~", "\x00", "gs://x"]),
                                         max_size=8).map("/".join))
@example("..foo.jpg")
@example("a/../../b")
@example("\\\\server\\share\\x.jpg")
@example("C:\\x.jpg")
@example("./././")
def test_clean_name_stays_inside(name):
  result = returns_or_input_error(paths.clean_name, name)
  if result is None:
    return
  assert isinstance(result, str) and result
  assert result != ".." and not result.startswith("../"), result
  assert not result.startswith("/") and "\\" not in result and "\x00" not in result
  assert not paths.is_remote(result)
  inside = posixpath.normpath(posixpath.join("/root", result))
  assert inside == "/root" or inside.startswith("/root/"), (name, result)
  if result.startswith(".."):  # '..foo' is an ordinary name inside the root
    assert result.split("/")[0] != ".."


def test_resolve_lone_surrogate(scratch):
  returns_or_input_error(paths.clean_name, "bad\ud800.jpg")
  returns_or_input_error(paths.resolve, scratch, "bad\ud800.jpg")


# ---------------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_follow_symlinks(tmp_path):
  """A symlinked image outside the image root: rejected (the message names the option)
  without --follow-symlinks, converted with it."""
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  data = jpeg((64, 48))
  (elsewhere / "real.jpg").write_bytes(data)
  root = tmp_path / "farm"
  coco = Coco(str(root), [(1, "cat")])
  coco.image(1, "linked.jpg", width=64, height=48)
  coco.image(2, "plain.jpg", jpeg((32, 24)), width=32, height=24)
  coco.ann(1, 1, [1, 1, 10, 10])
  os.symlink(elsewhere / "real.jpg", root / "linked.jpg")
  path = coco.write(str(root / "instances.json"))
  run = convert(["--input", path, "--output", str(tmp_path / "strict"), RUNNER])
  (error,) = run.errors
  assert error["reason"] == "symlink_escape" and "--follow-symlinks" in error["message"]
  assert [e["filename"] for e in run.examples] == ["plain.jpg"]
  run = convert(["--input", path, "--follow-symlinks", "--output", str(tmp_path / "follow"),
                 RUNNER])
  assert run.errors == []
  linked = run.by_filename()["linked.jpg"]
  assert linked["image/encoded"] == data and linked["image/object/class/text"] == [b"cat"]
  os.remove(elsewhere / "real.jpg")  # a dangling link is still refused
  run = convert(["--input", path, "--follow-symlinks", "--output", str(tmp_path / "dangling"),
                 RUNNER])
  assert [e["reason"] for e in run.errors] == ["symlink_escape"]


@pytest.mark.e2e
def test_an_image_root_symlink_repointed_between_runs_of_one_process(tmp_path):
  """A scheduler's long-lived process converts `current` (a link moved to each new export)
  again and again: every run resolves the root as it is then, not as an earlier run saw it."""
  import bad_data as bd
  current = tmp_path / "current"
  for version, names in (("v1", ["a.jpg"]), ("v2", ["b.jpg", "c.jpg"])):
    coco = bd.Coco(str(tmp_path / version), [(1, "cat")])
    for i, name in enumerate(names):
      coco.image(i + 1, name, bd.jpeg((64 + i, 48)))
      coco.ann(i + 1, 1, [4, 4, 20, 10])
    annotations = coco.write(str(tmp_path / f"{version}.json"))
    if current.is_symlink():
      current.unlink()
    current.symlink_to(tmp_path / version)
    run = bd.convert(["--format=coco", f"--input={annotations}", f"--images={current}",
                      "--output", str(tmp_path / f"out-{version}")])
    assert run.code == 0 and not run.errors, run.errors
    assert sorted(e["image/filename"] for e in run.examples) == [n.encode() for n in names]
    assert [e["image/width"] for e in run.examples] == [64 + i for i in range(len(names))]


@given(st.text(alphabet="ab./\\ é", min_size=1, max_size=12))
def test_clean_name_fast_path_is_normpath(name):
  """clean_name skips normpath when nothing in the name would change: same answer always."""
  try:
    got = paths.clean_name(name)
  except InputError:
    return
  assert got == posixpath.normpath(name.replace("\\", "/"))

"""storage/files.py: an image is checked again where it is read (storage.files.read_bytes via
write/encode.fetch_image): a file swapped for a symlink after the plan, a device or a FIFO in
its place, a file that grows past --max-image-bytes; and one conversion in which the swap
happens between planning and writing."""
from __future__ import annotations

import os
import threading

import pytest
from bad_data import RUNNER, Coco, convert, jpeg

from beam_tfrecord.records.model import ImageAnnotation, InputError
from beam_tfrecord.storage import files, paths
from beam_tfrecord.write import encode

STRICT = encode.EncodeOptions()
FOLLOW = encode.EncodeOptions(follow_symlinks=True)


def planned(root, name: str) -> ImageAnnotation:
  """The annotation as the plan made it (paths.resolve_sized), while the file was plain."""
  key, uri, size = paths.resolve_sized(str(root), name)
  return ImageAnnotation(key=key, uri=uri, source_id=name, source="test", size_bytes=size)


@pytest.fixture
def tree(tmp_path):
  """root/sub/a.jpg (planned as a plain file) and outside/secret.jpg."""
  root, outside = tmp_path / "root", tmp_path / "outside"
  (root / "sub").mkdir(parents=True)
  outside.mkdir()
  (root / "sub" / "a.jpg").write_bytes(b"inside")
  (outside / "secret.jpg").write_bytes(b"secret bytes")
  return root, outside


def swap(path, target) -> None:
  os.remove(path)
  os.symlink(target, path)


def reason(call) -> str:
  with pytest.raises(InputError) as e:
    call()
  return e.value.reason


def test_a_planned_image_reads_as_before(tree):
  root, _ = tree
  ann = planned(root, "sub/a.jpg")
  assert encode.image_root(ann) == str(root)
  assert encode.fetch_image(ann, STRICT)[0] == b"inside"
  assert encode.read_image(ann, FOLLOW) == b"inside"


def test_swapped_for_a_symlink_out_of_the_root_after_the_plan(tree):
  """Without --follow-symlinks the read refuses what resolve refused at plan time; with it,
  a readable regular file outside the root is what --follow-symlinks accepts."""
  root, outside = tree
  ann = planned(root, "sub/a.jpg")
  swap(root / "sub" / "a.jpg", outside / "secret.jpg")
  assert reason(lambda: encode.fetch_image(ann, STRICT)) == "symlink_escape"
  assert reason(lambda: encode.read_image(ann, STRICT)) == "symlink_escape"
  assert encode.fetch_image(ann, FOLLOW)[0] == b"secret bytes"


def test_a_symlink_that_stays_inside_the_root_is_read(tree):
  """As paths.resolve allows it without --follow-symlinks (the slow path: realpath, check,
  open the target without following)."""
  root, _ = tree
  (root / "b.jpg").write_bytes(b"other inside")
  ann = planned(root, "sub/a.jpg")
  swap(root / "sub" / "a.jpg", root / "b.jpg")
  assert encode.fetch_image(ann, STRICT)[0] == b"other inside"
  swap(root / "b.jpg", "/dev/zero")  # the link inside now leads to a device outside
  assert reason(lambda: encode.fetch_image(ann, STRICT)) == "symlink_escape"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_symlink_to_dev_zero_is_not_read(tree):
  """Refused from the fstat, before any byte is read (it read 8 GB until MemoryError)."""
  root, _ = tree
  ann = planned(root, "sub/a.jpg")
  swap(root / "sub" / "a.jpg", "/dev/zero")
  assert reason(lambda: encode.fetch_image(ann, STRICT)) == "symlink_escape"
  assert reason(lambda: encode.fetch_image(ann, FOLLOW)) == "not_a_file"
  assert reason(lambda: files.read_bytes("/dev/zero", limit=10)) == "not_a_file"


def _within(seconds: float, call):
  """call()'s InputError reason, failing (not hanging) when it blocks for `seconds`."""
  result = []
  thread = threading.Thread(target=lambda: result.append(reason(call)), daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), "the read blocked"
  return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_the_image_does_not_block(tree):
  root, outside = tree
  ann = planned(root, "sub/a.jpg")
  os.remove(root / "sub" / "a.jpg")
  os.mkfifo(root / "sub" / "a.jpg")
  assert _within(10, lambda: encode.fetch_image(ann, STRICT)) == "not_a_file"
  os.mkfifo(outside / "pipe")
  swap(root / "sub" / "a.jpg", outside / "pipe")
  assert _within(10, lambda: encode.fetch_image(ann, FOLLOW)) == "not_a_file"


def test_a_directory_in_place_of_the_image(tree):
  root, _ = tree
  ann = planned(root, "sub/a.jpg")
  os.remove(root / "sub" / "a.jpg")
  os.mkdir(root / "sub" / "a.jpg")
  assert reason(lambda: encode.fetch_image(ann, STRICT)) in ("not_a_file", "unreadable")


class _Growing:
  """os.fstat reporting a stale size (the file grew after it), os.read counting bytes."""

  def __init__(self, monkeypatch, stale_size: int):
    self.read = 0
    real_fstat, real_read = os.fstat, os.read

    def fstat(fd):
      st = real_fstat(fd)
      return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid,
                             st.st_gid, stale_size, st.st_atime, st.st_mtime, st.st_ctime))

    def read(fd, n):
      data = real_read(fd, n)
      self.read += len(data)
      return data
    monkeypatch.setattr(files.os, "fstat", fstat)
    monkeypatch.setattr(files.os, "read", read)


def test_a_file_that_grows_past_the_limit_is_read_to_limit_plus_one(tmp_path, monkeypatch):
  path = tmp_path / "growing.jpg"
  path.write_bytes(b"x" * 5_000_000)
  counter = _Growing(monkeypatch, stale_size=10)
  with pytest.raises(InputError) as e:
    files.read_bytes(str(path), limit=1000)
  assert e.value.reason == "image_too_large"
  assert counter.read == 1001


def test_a_file_that_grows_within_the_limit_is_read_whole(tmp_path, monkeypatch):
  path = tmp_path / "growing.jpg"
  path.write_bytes(bytes(range(256)) * 40)
  counter = _Growing(monkeypatch, stale_size=10)
  assert files.read_bytes(str(path), limit=10_240) == bytes(range(256)) * 40
  assert counter.read == 10_240


@pytest.mark.e2e
def test_an_image_swapped_between_planning_and_writing(tmp_path, monkeypatch):
  """The plan saw plain files; the shard writer then finds one replaced by a symlink to a
  file outside the image root (a valid JPEG): it is rejected, not written, without
  --follow-symlinks, and written with it."""
  from beam_tfrecord.write import transform
  outside = tmp_path / "outside"
  outside.mkdir()
  secret = jpeg((40, 30), color=(0, 0, 250))
  (outside / "secret.jpg").write_bytes(secret)
  root = tmp_path / "data"
  coco = Coco(str(root), [(1, "cat")])
  coco.image(1, "a.jpg", jpeg((64, 48)), width=40, height=30)
  coco.image(2, "b.jpg", jpeg((32, 24)), width=32, height=24)
  coco.ann(1, 1, [1, 1, 10, 10])
  path = coco.write(str(root / "instances.json"))
  original = transform.write_shard

  def swapping(task):
    if os.path.isfile(root / "a.jpg") and not os.path.islink(root / "a.jpg"):
      swap(root / "a.jpg", outside / "secret.jpg")
    return original(task)
  monkeypatch.setattr(transform, "write_shard", swapping)
  run = convert(["--input", path, "--output", str(tmp_path / "strict"), RUNNER])
  assert [(e["reason"], e["key"]) for e in run.errors] == [("symlink_escape", "a.jpg")]
  assert [e["filename"] for e in run.examples] == ["b.jpg"]
  assert os.path.islink(root / "a.jpg")
  run = convert(["--input", path, "--output", str(tmp_path / "follow"), "--follow-symlinks",
                 RUNNER])
  assert run.errors == []
  assert run.by_filename()["a.jpg"]["image/encoded"] == secret


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("boto3") is not None,
                    reason="boto3 is installed: s3:// is served by Beam")
@pytest.mark.parametrize("option", ["--input", "--output", "--images"])
def test_s3_without_boto3_is_one_line_saying_what_to_install(tmp_path, capsys, option):
  """Beam's S3 file system needs boto3, which this package does not install: an s3:// path
  was 'no such file' (--input) or an AssertionError with exit 1 (--output)."""
  from beam_tfrecord import cli
  args = {"--input": "s3://bucket/instances.json", "--output": str(tmp_path / "out"),
          "--images": str(tmp_path)}
  args[option] = "s3://bucket/" + ("out" if option == "--output" else "x")
  argv = ["convert", "--format", "coco"] + [v for k, x in args.items() for v in (k, x)]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("beam-tfrecord: error: "), err
  assert "boto3" in err[0] and "pip install" in err[0]
  assert not (tmp_path / "out").exists()


def test_read_text_reads_at_most_its_limit(tmp_path):
  path = tmp_path / "a.txt"
  path.write_bytes(b"x" * 10)
  assert files.read_text(str(path)) == b"x" * 10
  assert files.read_text(str(path), limit=10) == b"x" * 10
  with pytest.raises(InputError, match="more than 9 bytes") as e:
    files.read_text(str(path), limit=9)
  assert e.value.reason == "too_large"

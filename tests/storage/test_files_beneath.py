"""Issue 30, item 2: an image in a sub-folder is opened one folder at a time, following no
link below its root, so a folder swapped for a link after planning is never followed."""
from __future__ import annotations

import os

import pytest

from beam_tfrecord.records.model import InputError
from beam_tfrecord.storage import files


def _tree(tmp_path):
  root = tmp_path / "images"
  (root / "a" / "b").mkdir(parents=True)
  (root / "a" / "b" / "1.jpg").write_bytes(b"inside")
  outside = tmp_path / "outside" / "b"
  outside.mkdir(parents=True)
  (outside / "1.jpg").write_bytes(b"SECRET")
  return root, outside.parent


def test_a_folder_swapped_for_a_link_outside_is_not_followed(tmp_path):
  root, outside = _tree(tmp_path)
  uri = str(root / "a" / "b" / "1.jpg")
  assert files.read_bytes(uri, root=str(root)) == b"inside"
  os.rename(root / "a", tmp_path / "a-moved")
  os.symlink(outside, root / "a")  # images/a -> outside: images/a/b/1.jpg is now SECRET
  with pytest.raises(InputError) as e:
    files.read_bytes(uri, root=str(root))
  assert e.value.reason == "symlink_escape"
  # --follow-symlinks keeps today's behaviour
  assert files.read_bytes(uri, root=str(root), follow_symlinks=True) == b"SECRET"


def test_a_link_that_stays_inside_the_root_is_still_read(tmp_path):
  root, _ = _tree(tmp_path)
  os.symlink(root / "a", root / "alias")
  assert files.read_bytes(str(root / "alias" / "b" / "1.jpg"), root=str(root)) == b"inside"


def test_a_fifo_in_a_sub_folder_is_not_waited_on(tmp_path):
  root, _ = _tree(tmp_path)
  os.mkfifo(root / "a" / "b" / "2.jpg")
  with pytest.raises(InputError) as e:
    files.read_bytes(str(root / "a" / "b" / "2.jpg"), root=str(root))
  assert e.value.reason == "not_a_file"

"""finalize/output.py: what a manifest or a swap journal may make the tool delete or move (only
plain names directly inside the output), and the summary's counts. Files on disk, no pipeline."""
from __future__ import annotations

import json
import os

import pytest

from beam_tfrecord.errors import UsageError
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.storage import paths

# Entries that name something outside the output, a subdirectory of it, or the output itself.
BAD_ENTRIES = ["/abs", "../x", "a/b", "", ".", "..", "a\\b", None, ["a"]]


def _tree(root) -> dict:
  found = {}
  for d, _, names in os.walk(root):
    for n in names:
      with open(os.path.join(d, n), "rb") as f:
        found[os.path.relpath(os.path.join(d, n), root)] = f.read()
  return found


@pytest.fixture
def finished(tmp_path):
  """An output as a finished run leaves it, and a file beside it that is no one's business."""
  out = tmp_path / "out"
  out.mkdir()
  manifest = {"tool": "beam-tfrecord", "run_id": "r1", "created": "then",
              "files": ["label_map.pbtxt", "train-00000-of-00001.tfrecord"]}
  for name in manifest["files"]:
    (out / name).write_bytes(b"data of " + name.encode())
  (out / outputs.MANIFEST).write_text(json.dumps(manifest))
  victim = tmp_path / "x"
  victim.write_bytes(b"not the tool's")
  return out, manifest, victim


def _bad(entry, victim):
  return str(victim) if entry == "/abs" else entry


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_files_of_refuses_names_that_are_not_plain(entry):
  with pytest.raises(ValueError):
    outputs.files_of({"files": ["label_map.pbtxt", entry]})
  with pytest.raises(ValueError):  # a manifest from before the 'files' list
    outputs.files_of({"splits": {"train": {"shards": [{"path": entry}]}}})


def test_files_of_refuses_a_files_entry_that_is_not_a_list():
  with pytest.raises(ValueError):
    outputs.files_of({"files": "../x"})  # a string would be read letter by letter


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_check_ownership_refuses_a_manifest_with_a_bad_entry(finished, entry):
  """Exit 2 (UsageError) before anything is deleted, with or without --overwrite."""
  out, manifest, victim = finished
  manifest["files"].append(_bad(entry, victim))
  (out / outputs.MANIFEST).write_text(json.dumps(manifest))
  before = _tree(out.parent)
  for overwrite in (True, False):
    with pytest.raises(UsageError, match="plain names") as e:
      outputs.check_ownership(str(out), overwrite, [])
    assert "Nothing was deleted" in str(e.value) and "\n" not in str(e.value)
  assert _tree(out.parent) == before


def test_check_ownership_refuses_a_malformed_manifest_in_one_line(finished):
  out, manifest, _ = finished
  manifest.pop("files")
  manifest["splits"] = ["train"]  # not a mapping: was an AttributeError traceback
  (out / outputs.MANIFEST).write_text(json.dumps(manifest))
  with pytest.raises(UsageError, match="plain names"):
    outputs.check_ownership(str(out), True, [])


@pytest.mark.parametrize("entry", ["/abs", "../x", "a/b", "", "."])
def test_commit_never_deletes_what_a_bad_manifest_lists(finished, tmp_path, entry):
  """The check where the deletion happens, for a manifest changed after check_ownership."""
  out, manifest, victim = finished
  manifest["files"].append(_bad(entry, victim))
  (out / outputs.MANIFEST).write_text(json.dumps(manifest))
  run = out / f"{outputs.RUN_PREFIX}r2"
  run.mkdir()
  new = {"tool": "beam-tfrecord", "run_id": "r2", "files": ["val-00000-of-00001.tfrecord"]}
  (run / "val-00000-of-00001.tfrecord").write_bytes(b"new")
  (run / outputs.MANIFEST).write_text(json.dumps(new))
  before = _tree(tmp_path)
  with pytest.raises(ValueError):
    outputs.commit(str(out), str(run), new)
  assert _tree(tmp_path) == before  # nothing deleted or moved, no journal written


def _journal(out, **change):
  journal = {"run_id": "r2", "run_dir": f"{outputs.RUN_PREFIX}r2",
             "files": ["manifest.json", "t.rec"], "old_files": ["manifest.json", "old.rec"]}
  journal.update(change)
  (out / outputs.JOURNAL).write_text(json.dumps(journal))


@pytest.mark.parametrize("change", [
    {"old_files": ["manifest.json", "../x"]}, {"old_files": ["/abs"]},
    {"files": ["manifest.json", "a/b"]}, {"files": "t.rec"}, {"run_dir": ".."},
    {"run_dir": "."}, {"run_dir": "/abs"}, {"run_dir": "some-dir"},
])
def test_recover_refuses_a_journal_with_a_bad_name(finished, tmp_path, change):
  """`verify --repair` and the next convert roll an interrupted swap forward from the journal
  in the output, which anyone can edit: refused (exit 2) before its first step."""
  out, manifest, victim = finished
  change = {k: ([str(victim) if n == "/abs" else n for n in v] if isinstance(v, list) else
                str(victim.parent) if v == "/abs" else v) for k, v in change.items()}
  _journal(out, **change)
  run = out / f"{outputs.RUN_PREFIX}r2"
  run.mkdir()
  (run / outputs.MANIFEST).write_text("{}")
  before = _tree(tmp_path)
  with pytest.raises(UsageError, match="journal"):
    outputs.recover(str(out))
  assert _tree(tmp_path) == before
  # the journal the tool writes is still rolled forward
  (out / "old.rec").write_bytes(b"old")
  (run / "t.rec").write_bytes(b"new")
  _journal(out)
  assert "r2" in outputs.recover(str(out))
  assert sorted(os.listdir(out)) == ["label_map.pbtxt", "manifest.json", "t.rec",
                                     "train-00000-of-00001.tfrecord"]
  assert victim.read_bytes() == b"not the tool's"


def test_write_atomic_writes_only_plain_names(tmp_path):
  outputs.write_atomic(str(tmp_path), "a.json", b"{}")
  assert os.listdir(tmp_path) == ["a.json"]
  for name in ("../b.json", "sub/c.json", str(tmp_path / "d.json"), ""):
    with pytest.raises(paths.UnsafeName):
      outputs.write_atomic(str(tmp_path), name, b"{}")
  assert os.listdir(tmp_path) == ["a.json"] and not (tmp_path.parent / "b.json").exists()


def _manifest(count, levels, reasons):
  return {"version": "x", "format": "coco", "label_map": {"cat": 1},
          "splits": {"train": {"examples": 5, "objects": 7, "num_shards": 1, "bytes": 1000}},
          "totals": {"examples": 5, "images": 5, "objects": 7, "clipped_boxes": 0},
          "errors": {"count": count, "by_level": levels, "by_reason": reasons,
                     "files": ["errors-00000-of-00001.jsonl"]}}


def test_summary_counts_errors_without_warnings():
  """errors.count holds every report; a warning's image was converted all the same."""
  text = outputs.summary(_manifest(5, {"image": 3, "warning": 2},
                                   {"bad_box": 3, "background_category": 2}), "out")
  assert "errors 3, warnings 2" in text
  assert "errors and warnings by reason: bad_box 3, background_category 2" in text
  only = outputs.summary(_manifest(2, {"warning": 2}, {"background_category": 2}), "out")
  assert "errors 0, warnings 2" in only
  clean = outputs.summary(_manifest(0, {}, {}), "out", 1.25)
  assert clean.splitlines()[-1].endswith("errors 0, 1.2 s") and "warnings" not in clean
  old = _manifest(3, {}, {"bad_box": 3})
  old["errors"].pop("by_level")  # manifests written before the levels were recorded
  assert "errors 3" in outputs.summary(old, "out")


@pytest.mark.parametrize("schema, reasons, fate", [
    ("od_api", {"excluded_class": 4}, "images left without objects were kept as background"),
    ("classification", {"excluded_class": 4, "not_one_class": 2},
     "images left without a class were not written (not_one_class 2)"),
    ("tutorial", {"excluded_class": 4}, "images left without a class were not written"),
])
def test_the_summary_says_what_became_of_images_left_without_objects(schema, reasons, fate):
  """Issue 30 (minor): the --classes line said such images were kept, while a per-image
  label schema had rejected them (not_one_class)."""
  manifest = _manifest(sum(reasons.values()), {"warning": 4, "image": reasons.get(
      "not_one_class", 0)}, reasons)
  manifest.update(schema=schema, excluded_classes={"dog": 4})
  text = outputs.summary(manifest, "out")
  assert "excluded by --classes: 4 objects (dog 4); " + fate in text, text


def test_a_swap_refuses_links_before_it_moves_anything(tmp_path):
  """Issue 30, items 1 and 7: a journal whose run directory is a link to another folder, and
  a manifest entry that is a link to a directory, are refused before anything moves."""
  out, other = tmp_path / "out", tmp_path / "other"
  out.mkdir()
  other.mkdir()
  (other / "precious.txt").write_text("keep me")
  (out / "train-00000-of-00001.tfrecord").write_bytes(b"old")
  (out / "manifest.json").write_text("{}")
  run = out / ".beam-tfrecord-run-evil"
  run.symlink_to(other)
  journal = {"run_id": "x", "run_dir": run.name, "files": ["precious.txt", "manifest.json"],
             "old_files": ["train-00000-of-00001.tfrecord"]}
  (out / outputs.JOURNAL).write_text(json.dumps(journal))
  with pytest.raises(UsageError, match="link"):
    outputs.recover(str(out))
  assert (other / "precious.txt").read_text() == "keep me"
  assert (out / "train-00000-of-00001.tfrecord").read_bytes() == b"old"
  # a listed old file that is a link to a directory: refused before the journal is written
  (out / outputs.JOURNAL).unlink()
  run.unlink()
  run.mkdir()
  (run / "manifest.json").write_text("{}")
  (out / "train-00000-of-00001.tfrecord").unlink()
  (out / "train-00000-of-00001.tfrecord").symlink_to(other)
  before = sorted(os.listdir(out))
  with pytest.raises(UsageError, match="link"):
    outputs.check_swap_entries(str(out), str(run), {
        "files": ["manifest.json"], "old_files": ["train-00000-of-00001.tfrecord"]})
  assert sorted(os.listdir(out)) == before and (other / "precious.txt").exists()

"""A package missing from the worker fails the job; it is not an image's error (issue 39).

On a portable engine whose workers install only what the job staged, a setup.py without
pycocotools made every image of a --include-masks conversion an `unexpected_error` record
(encode.convert caught the ModuleNotFoundError as it catches an unforeseen input), so a run
with some images without masks would have exited 0 with those images silently gone. An
ImportError is the worker's environment: convert raises it, the bundle fails, and the runner
retries it or fails the job. Here on the DirectRunner (tests/engines/test_worker_env.py shows
it on Prism, with a staged package that lacks pycocotools).
"""
from __future__ import annotations

import pytest

import coco_masks
from conftest import run_python
from beam_tfrecord.records.model import ImageAnnotation
from beam_tfrecord.write import encode

BLOCKED = ("import sys; sys.modules['pycocotools'] = None  # import pycocotools: ImportError\n"
           "from beam_tfrecord.cli import main; sys.exit(main(sys.argv[1:]))")


def test_convert_raises_an_import_error_instead_of_reporting_the_image(monkeypatch):
  def missing(*args, **kwargs):
    raise ModuleNotFoundError("No module named 'pycocotools'", name="pycocotools")
  monkeypatch.setattr(encode, "read_image", missing)
  ann = ImageAnnotation(key="a.jpg", uri="a.jpg", source_id="a.jpg", source="s.json")
  with pytest.raises(ModuleNotFoundError):
    encode.convert(ann, {})


@pytest.mark.e2e
def test_a_conversion_without_pycocotools_fails_on_the_direct_runner(tmp_path):
  instances = coco_masks.make_coco(tmp_path / "masks")
  output = tmp_path / "out"
  done = run_python(["-c", BLOCKED, "convert", "--format=coco", f"--input={instances}",
                     f"--images={instances.parent / 'images'}", "--include-masks",
                     f"--output={output}"], timeout=300)
  assert done.returncode != 0, done.stderr[-3000:]
  assert "pycocotools" in done.stderr, done.stderr[-3000:]
  assert not output.exists() or not list(output.glob("*.tfrecord")), sorted(output.rglob("*"))


# A source's parse step catches what it did not foresee and reports it as the file's or the
# image's error; an ImportError there is the worker's environment too (VOC's and CVAT's XML
# parser is defusedxml, imported where the first XML is parsed).
BLOCKED_XML = BLOCKED.replace("'pycocotools'", "'defusedxml'")


@pytest.mark.e2e
def test_a_source_without_its_parser_fails_on_the_direct_runner(dataset, tmp_path):
  output = tmp_path / "out"
  done = run_python(["-c", BLOCKED_XML, "convert", "--format=voc", *dataset.inputs("voc"),
                     f"--output={output}"], timeout=300)
  assert done.returncode != 0, done.stderr[-3000:]
  assert "defusedxml" in done.stderr, done.stderr[-3000:]
  assert "unexpected_error" not in done.stderr, done.stderr[-3000:]
  assert not output.exists() or not list(output.glob("*.tfrecord")), sorted(output.rglob("*"))

"""`--append` and `--layout tfds` on the standalone Spark cluster give the DirectRunner's bytes
(issue 39: "each version equals the DirectRunner's").

One small generated COCO dataset (20 images, train and val) is converted on the cluster
(deploy/engines/convert-on.sh spark, PROCESS workers) and with the default in-process runner,
into two outputs, the Spark job beside the in-process one (one Spark job at a time: the first
would hold both workers' cores):
- `--append`: a first version; then the dataset grows (a new training image, a copy of one
  with boxes, with its annotations, in instances_train.json) and a second `--append` makes a
  second version; then a third `--append` with nothing changed publishes nothing. After each
  step the two outputs' whole trees (LATEST, versions/*/: shards, label map, errors file,
  catalog partitions, the manifest without its times and paths) are equal byte for byte
  (compare_runners.differences, README cards aside), and `beam-tfrecord verify` passes on
  the Spark output.
- `--layout tfds`: the same comparison, every file of the TFDS tree.
Both runners read the same dataset folder, so the images' file stamps the versions record are
the same.

Marked `engines`: `python -m pytest -m engines tests/engines/test_spark_versions.py` after
`bash deploy/engines/setup.sh spark` (a running cluster is used and left running, else one is
started and stopped: test_spark's `cluster` fixture, which checks the selection itself).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_runners  # noqa: E402
from test_spark import _master, cluster  # noqa: E402,F401  (the fixture, not the test)

pytestmark = pytest.mark.engines

BEAM_VERSION = compare_runners.BEAM_VERSION


@pytest.fixture(autouse=True)
def _selected(request):
  compare_runners.skip_unless_selected(
      request, "Spark jobs of --append versions and --layout tfds; after "
               "bash deploy/engines/setup.sh spark")


@pytest.fixture(scope="module")
def dataset(cluster, tmp_path_factory):
  sys.path.insert(0, str(compare_runners.REPO / "tests"))
  import conftest  # noqa: E402  (tests/: the generated dataset)
  return conftest.make_dataset(tmp_path_factory.mktemp("versions") / "data", count=20, seed=5,
                               extras=False)


def add_coco_image(coco: Path, images: Path, stem: str) -> None:
  """A new image in a COCO file: a copy of the first image with boxes, and its boxes, under new
  ids (a real source change: an image file no annotation names would not be one)."""
  doc = json.loads(coco.read_text(encoding="utf-8"))
  boxed = {a["image_id"] for a in doc["annotations"]}
  first = next(im for im in doc["images"] if im["id"] in boxed)
  name = stem + Path(first["file_name"]).suffix
  shutil.copyfile(images / first["file_name"], images / name)
  new_id = max(im["id"] for im in doc["images"]) + 1
  doc["images"].append(dict(first, id=new_id, file_name=name))
  next_ann = max(a["id"] for a in doc["annotations"]) + 1
  for n, ann in enumerate([a for a in doc["annotations"] if a["image_id"] == first["id"]]):
    doc["annotations"].append(dict(ann, id=next_ann + n, image_id=new_id))
  coco.write_text(json.dumps(doc), encoding="utf-8")


def both(args: List[str], spark_out: Path, direct_out: Path
         ) -> Tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
  """One conversion on the cluster (in a thread) and on the default runner, at once."""
  done: Dict[str, subprocess.CompletedProcess] = {}

  def on_spark():
    done["spark"] = compare_runners.convert_on("spark", args, spark_out, "process", timeout=600)

  job = threading.Thread(target=on_spark)
  job.start()
  direct = compare_runners.convert_direct(args, direct_out, timeout=300)
  job.join()
  assert direct.returncode == 0, f"DirectRunner failed: {direct.stderr[-3000:]}"
  spark = done.get("spark")
  assert spark is not None and spark.returncode == 0, (
      "Spark failed: " + (spark.stderr[-5000:] if spark else "did not run"))
  assert f"(Beam {BEAM_VERSION}, process)" in spark.stderr
  assert " on spark://" in spark.stderr
  return spark, direct


def verify(dest: Path) -> str:
  done = subprocess.run([compare_runners.python(), "-m", "beam_tfrecord.cli", "verify", str(dest)],
                        env=compare_runners.environment(compare_runners.REPO),
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stdout + done.stderr
  return done.stdout + done.stderr


def differences(direct: Path, spark: Path) -> List[str]:
  """compare_runners.differences, with each output's own path in its manifests made one: a
  version made by --append records the earlier version it planned from (config.append_base,
  a path inside its own output), as dataset_info.json names its output."""
  def manifest(path: Path, root: Path) -> dict:
    def strip(value):
      if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items()
                if k not in compare_runners.same_bytes.VOLATILE}
      if isinstance(value, list):
        return [strip(v) for v in value]
      return value
    return strip(json.loads(path.read_text(encoding="utf-8").replace(str(root), "OUT")))

  found = []
  for item in compare_runners.differences(direct, spark):
    rel = item[:-len(" differs")] if item.endswith(" differs") else ""
    if (Path(rel).name == "manifest.json"
        and manifest(direct / rel, direct) == manifest(spark / rel, spark)):
      continue
    found.append(item)
  return found


def versions(dest: Path) -> List[str]:
  return sorted(p.name for p in (dest / "versions").iterdir())


def test_append_versions_on_spark_equal_the_direct_runners(dataset, tmp_path, monkeypatch):
  monkeypatch.setenv("BEAM_TFRECORD_PYTHON", sys.executable)
  args = ["--format=coco", *dataset.inputs("coco"), "--num-shards=2", "--append"]
  spark_out, direct_out = tmp_path / "spark", tmp_path / "direct"

  both(args, spark_out, direct_out)
  assert versions(spark_out) == versions(direct_out) == ["00000001"]
  assert differences(direct_out, spark_out) == []
  assert "versions/00000001" in verify(spark_out)

  add_coco_image(dataset.coco_file("train"), dataset.image_dir, "added_0001")
  spark, _ = both(args, spark_out, direct_out)
  assert versions(spark_out) == versions(direct_out) == ["00000001", "00000002"], spark.stderr
  assert (spark_out / "LATEST").read_text().strip() == "versions/00000002"
  assert differences(direct_out, spark_out) == []
  assert "versions/00000002" in verify(spark_out)
  print("second version, Spark:", [l for l in (spark.stdout + spark.stderr).splitlines()
                                   if "version" in l.lower()][-3:])

  spark, direct = both(args, spark_out, direct_out)
  said = spark.stdout + spark.stderr
  print("third --append, nothing changed, Spark:",
        [l for l in said.splitlines() if "nothing published" in l])
  assert "nothing published" in said
  assert "nothing published" in direct.stdout + direct.stderr
  assert versions(spark_out) == versions(direct_out) == ["00000001", "00000002"]
  assert differences(direct_out, spark_out) == []
  verify(spark_out)


def test_tfds_layout_on_spark_equals_the_direct_runners(dataset, tmp_path, monkeypatch):
  monkeypatch.setenv("BEAM_TFRECORD_PYTHON", sys.executable)
  args = ["--format=coco", *dataset.inputs("coco"), "--layout=tfds", "--dataset-name=shapes"]
  spark_out, direct_out = tmp_path / "spark", tmp_path / "direct"
  both(args, spark_out, direct_out)
  shards = [p for p in spark_out.rglob("*.tfrecord*") if p.is_file()]
  assert shards and all(p.stat().st_size > 0 for p in shards)
  assert differences(direct_out, spark_out) == []

"""The official converter as a benchmark row: tensorflow/models `official/vision`
`create_coco_tf_record`, single process (`--num_processes=0`).

  python benchmarks/official_converter.py setup          # make the benchmark-only virtualenv (once)
  VENV/bin/python benchmarks/official_converter.py run --image_dir=... --object_annotations_file=... \
      --output_file_prefix=OUT/train --num_shards=1 --num_processes=0

`setup` makes CACHE/official-venv, a virtualenv used only here, and `pip download`s the
tf-models-official wheel (no dependencies) plus tf-keras into it. The wheel's own dependency
list pulls in half of PyPI (opencv, tf-text, sentencepiece, ...) that the COCO converter does
not use, so instead the venv sees this interpreter's packages (TensorFlow, NumPy, Pillow,
pycocotools, absl) through a .pth file. Nothing of this is installed in the project's venv.

`run` imports only the converter: `official/vision/__init__.py` imports every model config
and task (and their dependencies), so `official` and `official.vision` are entered as plain
namespace packages before the converter module runs, unchanged, as `__main__`.
When the wheel cannot be had (offline, no index), `setup` says so and run.py skips the row.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
WHEEL = "tf-models-official==2.20.0"
MODULE = "official.vision.data.create_coco_tf_record"


def venv_dir(cache_dir: str) -> str:
  return os.path.join(cache_dir, "official-venv")


def venv_python(cache_dir: str) -> str:
  return os.path.join(venv_dir(cache_dir), "bin", "python")


def setup(cache_dir: str) -> Optional[str]:
  """Make the venv if needed. Returns None when ready, else why the row must be skipped."""
  venv = venv_dir(cache_dir)
  python = venv_python(cache_dir)
  marker = os.path.join(venv, ".ready")
  if os.path.exists(marker):
    return None
  try:
    from importlib.metadata import version
    tf_version = version("tensorflow")
  except Exception:
    return "TensorFlow is not installed in this interpreter (the converter needs it)"
  major_minor = ".".join(tf_version.split(".")[:2])
  try:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True,
                   capture_output=True)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True,
                             text=True).stdout.strip()
    with open(os.path.join(purelib, "zz_project_site.pth"), "w") as f:
      f.write(sysconfig.get_paths()["purelib"] + "\n")
    wheels = os.path.join(venv, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheels, WHEEL,
                    f"tf-keras~={major_minor}.0"], check=True, capture_output=True, text=True,
                   timeout=600)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--target", purelib, "--find-links", wheels, WHEEL,
                    f"tf-keras~={major_minor}.0"], check=True, capture_output=True, text=True,
                   timeout=600)
    subprocess.run([python, __file__, "check"], check=True, capture_output=True, text=True,
                   timeout=600)
  except subprocess.CalledProcessError as e:
    return (f"the official converter is unavailable ({' '.join(map(str, e.cmd[:6]))}... "
            f"failed: {(e.stderr or e.stdout or '').strip().splitlines()[-1:]})")
  except subprocess.TimeoutExpired as e:
    return f"the official converter is unavailable ({e})"
  open(marker, "w").close()
  return None


def _import_converter_only() -> None:
  """Enter `official` and `official.vision` without running their __init__ files."""
  import importlib.util
  import types
  spec = importlib.util.find_spec("official")
  if spec is None:
    raise SystemExit("tf-models-official is not installed here: run `official_converter.py setup`")
  root = os.path.dirname(spec.origin)
  for name, path in (("official", root), ("official.vision", os.path.join(root, "vision"))):
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module


def main(argv) -> int:
  if argv[:1] == ["setup"]:
    cache = argv[1] if len(argv) > 1 else os.path.join(HERE, ".cache")
    why = setup(cache)
    print(why or f"ready: {venv_python(cache)}")
    return 1 if why else 0
  if argv[:1] in (["run"], ["check"]):
    _import_converter_only()
    import runpy
    if argv[0] == "check":
      __import__(MODULE)
      return 0
    sys.argv = [MODULE] + argv[1:]
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
    return 0
  print(__doc__)
  return 2


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))

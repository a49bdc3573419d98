"""Are the outputs on Prism or Spark byte-identical to the DirectRunner's? (issue 39)

  python tests/engines/compare_runners.py [--engine prism|spark] [--env process|loopback]
                                          [--formats coco,voc,...] [--keep] [--tree DIR]

Makes the tests' generated dataset in every format the tool reads (benchmarks/same_bytes.py's
sources: the tests' writers of each labelling tool's layout, COCO with every kind of
segmentation), plus COCO with `--layout tfds`; converts each with the default in-process runner
(no --runner) and with deploy/engines/convert-on.sh ENGINE (prism by default; spark wants
`deploy/engines/cluster.sh start spark` first), and compares every file that carries
no time (shards, label maps, error files, the manifest without its times; under --layout tfds
every file of the tree) byte for byte. Exit 0 when all are identical.
--tree DIR: run that checkout's beam_tfrecord (PYTHONPATH and cwd), e.g. a worktree with
proposed fixes applied. Conversions run one at a time (2-core machine).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CONVERT_ON = REPO / "deploy" / "engines" / "convert-on.sh"
for _path in (REPO / "benchmarks", REPO / "tests"):
  if str(_path) not in sys.path:
    sys.path.insert(0, str(_path))
import same_bytes  # noqa: E402  (benchmarks/: the formats, and how outputs compare)

# setup.sh's cache, and what it builds for this SDK's Beam version (read as setup.sh does)
BEAM_VERSION = importlib.metadata.version("apache-beam")
CACHE = Path(os.environ.get("ENGINES_CACHE",
                            Path.home() / ".cache" / "beam-tfrecord" / "engines"))
BOOT = Path(os.environ.get("BEAM_BOOT", CACHE / "python-boot" / f"v{BEAM_VERSION}" / "boot"))


def skip_unless_selected(request, what: str) -> None:
  """The engines tests run only when the marker expression names `engines` (-m engines)."""
  import pytest
  if "engines" not in (request.config.option.markexpr or ""):
    pytest.skip(f"an engines test ({what}): select it with -m engines")


def sources(root: Path) -> Dict[str, List[str]]:
  """{name: convert arguments}: benchmarks/same_bytes.py's formats, and COCO as --layout tfds."""
  found = same_bytes.make_sources(root)
  found["coco-tfds"] = found["coco"] + ["--layout=tfds", "--dataset-name=shapes"]
  found["coco-copies"] = coco_with_copies(root / "copies")
  return found


def small_sources(root: Path) -> Dict[str, List[str]]:
  """{name: convert arguments} of one small generated dataset in three formats: COCO with
  masks (every kind of segmentation), VOC (two shards, ArrayRecord files) and YOLO (index
  files); what the engines tests run."""
  import coco_masks  # noqa: E402  (tests/, on sys.path above)
  import conftest  # noqa: E402
  import layouts  # noqa: E402
  ds = conftest.make_dataset(root / "data", count=6, seed=3)
  masks = coco_masks.make_coco(root / "masks")
  yolo = layouts.write_ultralytics(ds.images, ds.image_dir, root / "yolo")
  return {
      "coco-masks": ["--format=coco", f"--input={masks}", f"--images={masks.parent / 'images'}",
                     "--include-masks"],
      "voc": ["--format=voc", *ds.inputs("voc"), "--num-shards=2",
              "--file-format=array_record"],
      "yolo": ["--format=yolo", f"--input={yolo}", "--index-files"],
  }


def coco_with_copies(root: Path, count: int = 12, contents: int = 6,
                     copies: int = 8) -> List[str]:
  """A COCO dataset where each of `contents` images' bytes sit under `copies` more names:
  duplicate_content
  warnings from FindCopies' shuffle, whose order on a distributed runner is the runner's
  (/tmp/engines-fixes/1.diff: errors-*.jsonl sorted in Finalize)."""
  import conftest  # noqa: E402  (tests/, on sys.path above)
  ds = conftest.make_dataset(root, count=count, seed=11, extras=False)
  doc = json.loads(ds.coco_file("train").read_text(encoding="utf-8"))
  for first in doc["images"][:contents]:
    for n in range(copies):
      name = f"copy_{n:03d}_{first['file_name']}"
      shutil.copy(ds.image_dir / first["file_name"], ds.image_dir / name)
      doc["images"].append(dict(first, id=100_000 + 1_000 * first["id"] + n, file_name=name))
  ds.coco_file("train").write_text(json.dumps(doc), encoding="utf-8")
  return ["--format=coco", *ds.inputs("coco"), "--num-shards=2"]


def differences(a: Path, b: Path) -> List[str]:
  """benchmarks/same_bytes.differences, error files byte for byte: their order is what a
  distributed runner changes."""
  return same_bytes.differences(a, b, ordered_errors=True)


def verify(output: Path) -> List[str]:
  """`beam-tfrecord verify` of an output: [] when it passes, else its last lines."""
  done = subprocess.run([python(), "-m", "beam_tfrecord.cli", "verify", str(output)],
                        cwd=REPO, env=environment(REPO), capture_output=True, text=True,
                        timeout=300)
  return [] if done.returncode == 0 else [f"verify {output}: exit {done.returncode}: "
                                          f"{(done.stdout + done.stderr)[-1500:]}"]


def environment(tree: Path) -> Dict[str, str]:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  if tree != REPO:
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # PROCESS workers install what the job stages: that checkout's package, not this one's
    env["BEAM_TFRECORD_SETUP_FILE"] = str(tree / "setup.py")
  return env


def python() -> str:
  return os.environ.get("BEAM_TFRECORD_PYTHON") or str(REPO / ".venv" / "bin" / "python")


def convert_direct(args: List[str], output: Path, tree: Path = REPO,
                   timeout: float = 600) -> subprocess.CompletedProcess:
  """The default runner (in-process FnApiRunner: no --runner)."""
  return subprocess.run([python(), "-m", "beam_tfrecord.cli", "convert", *args,
                         f"--output={output}"], cwd=tree, env=environment(tree),
                        capture_output=True, text=True, timeout=timeout)


def convert_on(engine: str, args: List[str], output: Path, env_type: str = "process",
               tree: Path = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
  """deploy/engines/convert-on.sh ENGINE (prism, spark)."""
  return subprocess.run(["bash", str(CONVERT_ON), engine, "--env", env_type, "--", *args,
                         f"--output={output}"], cwd=tree, env=environment(tree),
                        capture_output=True, text=True, timeout=timeout)


def convert_prism(args: List[str], output: Path, env_type: str = "process", tree: Path = REPO,
                  timeout: float = 600) -> subprocess.CompletedProcess:
  return convert_on("prism", args, output, env_type, tree, timeout)


def beside_direct(inputs: Dict[str, List[str]], root: Path, engine: str,
                  convert: Callable[[List[str], Path], subprocess.CompletedProcess],
                  says: Sequence[str] = ()) -> List[str]:
  """Each input converted on `engine` (`convert(args, output)`: the engine's jobs one after
  the other, in a thread) beside the default runner's conversions, into root/NAME/ENGINE and
  root/NAME/direct. Asserts that each engine run names this Beam version with PROCESS
  workers, and each of `says`, and wrote non-empty shards; returns the problems ([] when
  none): a failed run, a file that differs from the default runner's, a failed verify."""
  folder = engine.lower()
  on_engine: Dict[str, subprocess.CompletedProcess] = {}

  def jobs():
    for name, args in inputs.items():
      on_engine[name] = convert(args, root / name / folder)

  thread = threading.Thread(target=jobs)
  thread.start()
  direct = {name: convert_direct(args, root / name / "direct", timeout=120)
            for name, args in inputs.items()}
  thread.join()
  problems = []
  for name in inputs:
    if direct[name].returncode != 0:
      problems.append(f"{name}: DirectRunner failed: {direct[name].stderr[-3000:]}")
    elif name not in on_engine or on_engine[name].returncode != 0:
      problems.append(f"{name}: {engine} failed: " +
                      (on_engine[name].stderr[-5000:] if name in on_engine else "did not run"))
    else:
      for said in (f"(Beam {BEAM_VERSION}, process)", *says):
        assert said in on_engine[name].stderr, (name, said)
      shards = sorted(p for p in (root / name / folder).iterdir()
                      if p.suffix in (".tfrecord", ".array_record"))
      assert shards and all(p.stat().st_size > 0 for p in shards), name
      problems += [f"{name}: {d}" for d in
                   differences(root / name / "direct", root / name / folder)]
      problems += verify(root / name / folder)
  return problems


def last_error(done: subprocess.CompletedProcess) -> str:
  lines = [l for l in done.stderr.splitlines() if l.startswith("beam-tfrecord:")]
  return (lines[-1] if lines else (done.stderr.strip().splitlines() or [""])[-1])[:2000]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--engine", default="prism", choices=["prism", "spark"])
  parser.add_argument("--env", default="process", choices=["process", "loopback"])
  parser.add_argument("--formats", help="comma-separated subset (default: all)")
  parser.add_argument("--tree", default=str(REPO), help="the checkout to run (default: this)")
  parser.add_argument("--keep", action="store_true", help="keep the outputs and logs")
  args = parser.parse_args(argv)
  tree = Path(args.tree).resolve()
  work = Path(tempfile.mkdtemp(prefix="engines-compare-"))
  failures = 0
  try:
    found = sources(work / "src")
    names = args.formats.split(",") if args.formats else list(found)
    for name in names:
      direct, engine = work / "out" / f"{name}-direct", work / "out" / f"{name}-{args.engine}"
      d = convert_direct(found[name], direct, tree)
      started = time.monotonic()
      p = convert_on(args.engine, found[name], engine, args.env, tree)
      took = time.monotonic() - started
      (work / f"{name}-{args.engine}.log").write_text(p.stderr)
      if d.returncode != 0:
        print(f"{name}: DirectRunner failed ({d.returncode}): {last_error(d)}")
        failures += 1
      elif p.returncode != 0:
        print(f"{name}: {args.engine} ({args.env}) failed ({p.returncode}, {took:.0f} s): "
              f"{last_error(p)}")
        failures += 1
      else:
        diff = differences(direct, engine)
        print(f"{name}: " + ("identical" if not diff else "DIFFERENT: " + "; ".join(diff[:5])) +
              f" ({args.engine} {took:.0f} s)")
        failures += bool(diff)
      sys.stdout.flush()
  finally:
    if args.keep:
      print(f"outputs and logs kept in {work}")
    else:
      shutil.rmtree(work, ignore_errors=True)
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())

"""The package's shape: stages import only earlier stages (no import circle), Beam-free
modules stay Beam-free, and the commands that only read an output (--help, inspect, verify,
show) never import Apache Beam."""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Dict, List, Set

import pytest
from conftest import run_python

PACKAGE = Path(__file__).resolve().parents[1] / "beam_tfrecord"

# Modules that must import without Apache Beam, whatever else changes: the writer processes
# (write/shard_writer serves them) start in ~0.2 s instead of ~4 s, and the read-only commands
# and --help answer at once. Remote paths still reach Beam's FileSystems, imported inside the
# function that needs it. Every other module that imports no Beam itself is checked too
# (beam_free_modules): none may import it by accident through a helper.
MUST_STAY_BEAM_FREE = [
    "beam_tfrecord", "beam_tfrecord.cli", "beam_tfrecord.config", "beam_tfrecord.errors",
    "beam_tfrecord.reader", "beam_tfrecord.reasons", "beam_tfrecord.sources.registry",
    "beam_tfrecord.sources.detect", "beam_tfrecord.records.manifest",
    "beam_tfrecord.write.shard_writer", "beam_tfrecord.write.encode", "beam_tfrecord.schemas",
    "beam_tfrecord.finalize.output", "beam_tfrecord.readback.reader",
    "beam_tfrecord.readback.verify", "beam_tfrecord.readback.stats", "beam_tfrecord.readback.show",
    # the worker processes of the COCO join (storage/processes serves them)
    "beam_tfrecord.runners", "beam_tfrecord.storage.processes",
    "beam_tfrecord.sources.coco.join_pool",
]


def imports_beam_itself(path: Path) -> bool:
  """Whether a module imports apache_beam in a module-level import statement."""
  tree = ast.parse(path.read_text())
  top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
  names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names] + \
      [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
  return any(m.startswith("apache_beam") for m in names)


def beam_free_modules() -> List[str]:
  """Every package module that does not import Beam itself at module level."""
  return sorted(_module_name(p) for p in PACKAGE.rglob("*.py") if not imports_beam_itself(p))


# The stages in the order data flows through them (docs/architecture.md, "Stages"): a module
# imports from its own stage or an earlier one, never a later one. The base (the package root,
# errors, reasons, runners: which runner runs the pipeline) comes first; the commands that wire the stages (config, pipeline, cli/,
# reader, sample) come last and may import any stage.
STAGES = ["base", "records", "storage", "schemas", "sources", "prepare", "plan", "write",
          "finalize", "readback", "commands"]
BASE = {"beam_tfrecord", "beam_tfrecord.errors", "beam_tfrecord.reasons",
        "beam_tfrecord.runners"}


def stage_of(module: str) -> str:
  """The stage of a package module: its folder under beam_tfrecord/, else base or commands."""
  if module in BASE:
    return "base"
  parts = module.split(".")
  if parts[1:2] == ["cli"]:  # the command line's package
    return "commands"
  if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES):
    assert parts[1] in STAGES, f"{module}: folder {parts[1]!r} is not a stage in STAGES"
    return parts[1]
  return "commands"


def backward_imports(graph: Dict[str, Set[str]]) -> List[str]:
  """'a -> b' for each import of a later stage's module."""
  rank = {stage: i for i, stage in enumerate(STAGES)}
  return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                if rank[stage_of(b)] > rank[stage_of(a)])


def _module_name(path: Path) -> str:
  parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def import_graph() -> Dict[str, Set[str]]:
  """{module: package modules it imports}, from every import statement in the package,
  module-level or inside a function: a circle through a function-level import is a circle."""
  modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
  graph: Dict[str, Set[str]] = {}
  for name, path in modules.items():
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                   else node.module for a in node.names]
      else:
        continue
      edges.update(t for t in targets if t in modules and t != name)
    graph[name] = edges
  return graph


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
  """One import circle as [a, b, ..., a], or [] when the graph has none."""
  state: Dict[str, int] = {}  # 1: on the current path, 2: done
  path: List[str] = []

  def visit(node: str) -> List[str]:
    state[node] = 1
    path.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == 1:
        return path[path.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    path.pop()
    state[node] = 2
    return []

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return []


def test_find_cycle_finds_one():
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_backward_imports_are_found():
  graph = {"beam_tfrecord.write.a": {"beam_tfrecord.finalize.b", "beam_tfrecord.records.c"},
           "beam_tfrecord.records.c": {"beam_tfrecord.errors"},
           "beam_tfrecord.errors": {"beam_tfrecord.config"}}
  assert backward_imports(graph) == ["beam_tfrecord.errors -> beam_tfrecord.config",
                                     "beam_tfrecord.write.a -> beam_tfrecord.finalize.b"]


def test_stages_only_import_earlier_stages():
  """Also proves there is no circle between stages; test_no_import_circle covers the rest."""
  graph = import_graph()
  assert {stage_of(m) for m in graph} == set(STAGES)  # every stage has modules, none unknown
  backward = backward_imports(graph)
  assert not backward, "imports of a later stage:\n" + "\n".join(backward)


def test_no_import_circle():
  graph = import_graph()
  assert len(graph) > 40 and graph["beam_tfrecord.pipeline"]  # the parse saw the package
  cycle = find_cycle(graph)
  assert not cycle, "import circle: " + " -> ".join(cycle)


def test_beam_free_modules_do_not_import_beam():
  """Each module that imports no Beam itself imports it through nothing else either."""
  code = ("import importlib, json, sys\n"
          "for name in json.loads(sys.argv[1]):\n"
          "  importlib.import_module(name)\n"
          "  if 'apache_beam' in sys.modules:\n"
          "    sys.exit(f'{name} imported apache_beam')\n")
  modules = beam_free_modules()
  assert len(modules) > 100 and "beam_tfrecord.storage.paths" in modules
  result = run_python(["-c", code, json.dumps(modules)])
  assert result.returncode == 0, result.stderr


def test_the_modules_that_must_stay_beam_free_are():
  free = set(beam_free_modules())
  assert [m for m in MUST_STAY_BEAM_FREE if m not in free] == []


@pytest.fixture(scope="module")
def finished_output(tmp_path_factory) -> str:
  from beam_tfrecord import cli, sample
  root = tmp_path_factory.mktemp("layout")
  sample.make_dataset(str(root / "data"), count=6)
  out = str(root / "out")
  code = cli.main(["convert", "--format", "coco", "--input",
                   f"train={root / 'data' / 'instances_train.json'}", "--images",
                   str(root / "data" / "images"), "--output", out])
  assert code == 0
  return out


READ_ONLY_COMMANDS = [["--help"], ["convert", "--help"], ["inspect", "{out}"],
                      ["verify", "{out}"], ["verify", "--repair", "{out}"],
                      ["show", "{out}", "--output", "{out}/../grid.png"]]


@pytest.fixture(scope="module")
def read_only_runs(finished_output):
  """Each of READ_ONLY_COMMANDS in turn in one fresh Python (TensorFlow, which verify
  imports, is imported once): after each, its exit code and whether apache_beam is imported
  by then. A module is never unloaded, so the first command that imports Beam and every one
  after it say BEAM."""
  commands = [[a.replace("{out}", finished_output) for a in c] for c in READ_ONLY_COMMANDS]
  code = ("import json, sys\n"
          "from beam_tfrecord import cli\n"
          "for argv in json.loads(sys.argv[1]):\n"
          "  try:\n"
          "    code = cli.main(argv)\n"
          "  except SystemExit as e:\n"
          "    code = e.code\n"
          "  print('@@@', 'BEAM' if 'apache_beam' in sys.modules else 'NO-BEAM', code,\n"
          "        flush=True)\n")
  result = run_python(["-c", code, json.dumps(commands)])
  assert result.returncode == 0, result.stderr
  said = [line[4:] for line in result.stdout.splitlines() if line.startswith("@@@ ")]
  assert len(said) == len(commands), result.stdout[-2000:]
  return dict(zip(map(tuple, READ_ONLY_COMMANDS), said)), result.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("command", READ_ONLY_COMMANDS)
def test_read_only_commands_do_not_import_beam(command, read_only_runs, finished_output):
  said, stdout = read_only_runs
  assert said[tuple(command)] == "NO-BEAM 0", stdout[-2000:]
  if command[0] == "show":
    assert Path(finished_output).parent.joinpath("grid.png").stat().st_size > 0

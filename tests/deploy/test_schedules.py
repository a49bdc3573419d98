"""The schedulers' examples and defaults: the crontab line in deploy/cron/README.md and the
Airflow DAG run the tool's default local runner (no --direct_running_mode=multi_threading,
which lost records under load) and use the tool's versioned outputs (--append), not the
in-place options. Read from the files, without Airflow (it lives in its own venv; the DAG is
parsed, not imported)."""
from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

from beam_tfrecord import cli

REPO = Path(__file__).resolve().parents[2]
CRON_README = REPO / "deploy" / "cron" / "README.md"
DAG = REPO / "deploy" / "airflow" / "dags" / "beam_tfrecord_dag.py"
IN_PLACE = ("--if-changed", "--incremental", "--plan-from", "--overwrite")


def crontab_lines():
  """The schedule lines of the README's ```cron blocks."""
  blocks = re.findall(r"```cron\n(.*?)```", CRON_README.read_text(), re.S)
  assert blocks, "no ```cron block in deploy/cron/README.md"
  return [line for block in blocks for line in block.splitlines()
          if re.match(r"\s*[0-9*@]", line)]


def test_the_crontab_example_runs_the_default_runner_through_the_wrapper():
  lines = crontab_lines()
  assert lines
  for line in lines:
    assert "multi_threading" not in line and "direct_running_mode" not in line, line
    command = line.split(None, 5)[5].split(">", 1)[0]  # after the five time fields
    words = shlex.split(command)
    assert words[0].endswith("deploy/cron/beam-tfrecord-cron.sh"), words[0]
    convert = words[words.index("--") + 1:]
    assert not [w for w in convert if w.startswith(IN_PLACE + ("--output", "--append",
                                                               "--keep"))], convert
    # what the wrapper then runs is a valid convert command line
    args, unknown = cli.make_parser().parse_known_args(
        ["convert", *convert, "--append", "--output", "/tmp/x", "--keep", "5"])
    assert args.append and not unknown, unknown


def _dag_tree():
  return ast.parse(DAG.read_text())


def _params(tree):
  """{name: the Param(...) call} of every dict literal in the DAG file."""
  found = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Dict):
      for key, value in zip(node.keys, node.values):
        if isinstance(key, ast.Constant) and isinstance(value, ast.Call) and \
            getattr(value.func, "id", None) == "Param":
          found.setdefault(key.value, []).append(value)
  return found


def test_the_dag_defaults_leave_the_runner_mode_to_the_tool():
  params = _params(_dag_tree())
  for name in ("direct_running_mode", "direct_num_workers"):
    (call,) = params[name]
    assert isinstance(call.args[0], ast.Constant) and call.args[0].value is None, \
        f"{name} must default to None (nothing passed: the tool's default runner)"
  assert "multi_threading" not in ast.unparse(params["direct_running_mode"][0].args[0])


def test_the_dag_appends_versions_and_keeps_five():
  tree = _dag_tree()
  params = _params(tree)
  (keep,) = params["keep"]
  assert keep.args[0].value == 5
  assert "if_changed" not in params and "incremental" not in params
  options = next(ast.unparse(n) for n in ast.walk(tree)
                 if isinstance(n, ast.FunctionDef) and n.name == "_convert_options")
  assert "'append': True" in options and "'keep': params.keep" in options
  for old in ("if-changed", "incremental", "overwrite", "plan-from"):
    assert f"'{old}'" not in options, old

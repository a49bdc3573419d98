"""The reason-code catalogue (beam_tfrecord/reasons.py) against the package's code: every
reason the code makes is catalogued, every catalogued reason is made somewhere, levels agree
where the code states them, and docs/errors.md is what the catalogue renders.

The scan reads the source (ast), it runs nothing. Reason codes reach an error record as
  ErrorRecord(..., reason=X), InputError(stage, X, message), dataclasses.replace(r, reason=X),
  a wrapper that passes its parameter on (records/boxes.py: _bad(reason, message)), and
  counter pairs [(X, n), ("level:warning", n)] (prepare/select.py: excluded objects);
where X is a literal, a module constant (also one imported from another package module), a
conditional of those, or a local set from a module function's return (voc's resolve_split).
A reason it cannot resolve to literals is a failure naming the line, so a new pattern cannot
slip past it; `e.reason` passes on a code already made elsewhere.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

from beam_tfrecord import reasons
from beam_tfrecord.records import model

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "beam_tfrecord"


class Use(NamedTuple):
  module: str
  line: int
  code: str
  level: Optional[str]   # the level the code states at this spot, None when decided elsewhere
  made: bool             # False: only compared with (e.reason == ...), or listed in *REASONS


def _call_name(node: ast.AST) -> Optional[str]:
  if isinstance(node, ast.Call):
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
  return None


def _arg(call: ast.Call, index: int, keyword: str) -> Optional[ast.expr]:
  for k in call.keywords:
    if k.arg == keyword:
      return k.value
  return call.args[index] if len(call.args) > index else None


class _Module:
  def __init__(self, name: str, tree: ast.Module):
    self.name, self.tree = name, tree
    self.parents: Dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
      for child in ast.iter_child_nodes(node):
        self.parents[child] = node
    self.functions = {n.name: n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    self.constants: Dict[str, ast.expr] = {}
    self.imported: Dict[str, Tuple[str, str]] = {}  # local name -> (module, name)
    for node in tree.body:
      if isinstance(node, ast.Assign):
        for target in node.targets:
          if isinstance(target, ast.Name):
            self.constants[target.id] = node.value
      elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
          self.imported[alias.asname or alias.name] = (node.module, alias.name)

  def function_of(self, node: ast.AST) -> Optional[ast.AST]:
    while node in self.parents:
      node = self.parents[node]
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return node
    return None


class _Unresolved(Exception):
  pass


def _strings(expr: ast.expr, mod: _Module, modules: Dict[str, _Module], depth: int = 0
             ) -> Set[str]:
  """The string values `expr` can take ('' dropped: no code), or _Unresolved."""
  if depth > 8:
    raise _Unresolved(ast.unparse(expr))
  again = lambda e, m=mod: _strings(e, m, modules, depth + 1)  # noqa: E731
  if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
    return {expr.value} - {""}
  if isinstance(expr, ast.IfExp):
    return again(expr.body) | again(expr.orelse)
  if isinstance(expr, ast.BoolOp):
    return set().union(*(again(v) for v in expr.values))
  if isinstance(expr, ast.Name):
    function = mod.function_of(expr)
    local = sorted((n for n in ast.walk(function) if isinstance(n, ast.Assign)
                    and n.lineno <= expr.lineno), key=lambda n: n.lineno) if function else []
    for node in reversed(local):
      for target in node.targets:
        if isinstance(target, ast.Name) and target.id == expr.id:
          return again(node.value)
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call) and any(
            isinstance(t, ast.Name) and t.id == expr.id for t in target.elts):
          index = [getattr(t, "id", None) for t in target.elts].index(expr.id)
          name, owner = _call_name(node.value) or "", mod
          if name not in mod.functions and name in mod.imported:  # from another module
            source, name = mod.imported[name]
            owner = modules.get(source, mod)
          callee = owner.functions.get(name)
          if callee is None:
            raise _Unresolved(ast.unparse(node.value))
          found: Set[str] = set()
          for ret in ast.walk(callee):
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
              found |= again(ret.value.elts[index], owner)
          return found
    if expr.id in mod.constants:
      return again(mod.constants[expr.id])
    if expr.id in mod.imported:
      source, name = mod.imported[expr.id]
      if source in modules and name in modules[source].constants:
        return again(modules[source].constants[name], modules[source])
  raise _Unresolved(ast.unparse(expr))


def _level(expr: Optional[ast.expr]) -> Optional[str]:
  if expr is None:
    return "image"  # ErrorRecord's and InputError.record's default
  return expr.value if isinstance(expr, ast.Constant) else None


def _levels_beside(node: ast.AST, mod: _Module) -> Optional[str]:
  """The level an InputError is paired with where it is made: ("warning", InputError(...)),
  (InputError(...), "object"), InputError(...).record(..., level="file")."""
  parent = mod.parents.get(node)
  if isinstance(parent, ast.Tuple):
    stated = [e.value for e in parent.elts if isinstance(e, ast.Constant)
              and e.value in model.LEVELS]
    return stated[0] if len(stated) == 1 else None
  if isinstance(parent, ast.Attribute) and parent.attr == "record":
    call = mod.parents.get(parent)
    if isinstance(call, ast.Call):
      return _level(_arg(call, 2, "level"))
  return None


def _passed_on(expr: ast.expr) -> bool:
  return isinstance(expr, ast.Attribute) and expr.attr == "reason"


def scan(sources: Dict[str, str]) -> Tuple[List[Use], List[str]]:
  """(every reason code made or compared with in `sources`, {module name: its text}, as Uses;
  'module:line: expression' for each reason that could not be resolved to literals)."""
  modules = {name: _Module(name, ast.parse(text, name)) for name, text in sources.items()}
  uses: List[Use] = []
  problems: List[str] = []

  def add(mod: _Module, node: ast.AST, expr: ast.expr, level: Optional[str], made: bool = True,
          paired: Optional[ast.expr] = None) -> None:
    if _passed_on(expr):
      return
    try:
      if (isinstance(expr, ast.IfExp) and isinstance(paired, ast.IfExp)
          and ast.dump(expr.test) == ast.dump(paired.test)):  # reason and level chosen together
        for branch, level_branch in ((expr.body, paired.body), (expr.orelse, paired.orelse)):
          for code in _strings(branch, mod, modules):
            uses.append(Use(mod.name, node.lineno, code, _level(level_branch), made))
        return
      for code in _strings(expr, mod, modules):
        uses.append(Use(mod.name, node.lineno, code, level, made))
    except _Unresolved as e:
      problems.append(f"{mod.name}:{node.lineno}: reason {e}")

  for mod in modules.values():
    wrappers: Dict[str, int] = {}  # a function passing its parameter on as the reason
    for node in ast.walk(mod.tree):
      name = _call_name(node)
      if name in ("ErrorRecord", "InputError", "replace"):
        assert isinstance(node, ast.Call)
        if name == "ErrorRecord":
          expr, level_expr = _arg(node, 2, "reason"), _arg(node, 5, "level")
          level = _level(level_expr)
        elif name == "InputError":
          expr, level_expr = _arg(node, 1, "reason"), None
          level = _levels_beside(node, mod)
        else:
          expr, level_expr, level = _arg(node, 99, "reason"), None, None
        if expr is None:
          continue  # ErrorRecord(**fields): a record read back, made elsewhere
        function = mod.function_of(node)
        params = [a.arg for a in function.args.args if a.arg not in ("self", "cls")] \
            if isinstance(function, ast.FunctionDef) else []
        if isinstance(expr, ast.Name) and expr.id in params:
          wrappers[function.name] = params.index(expr.id)
          continue
        add(mod, node, expr, level, paired=level_expr)
      elif isinstance(node, ast.Compare) and any(map(_passed_on, [node.left, *node.comparators])):
        for side in [node.left, *node.comparators]:
          if not _passed_on(side):
            add(mod, node, side, None, made=False)
      elif isinstance(node, (ast.List, ast.Tuple)):
        pairs = [e for e in node.elts if isinstance(e, ast.Tuple) and e.elts]
        stated = [e.elts[0].value for e in pairs if isinstance(e.elts[0], ast.Constant)
                  and str(e.elts[0].value).startswith("level:")]
        for pair in pairs if stated else []:
          first = pair.elts[0]  # a BinOp: a per-class key, 'excluded:' + name
          if not isinstance(first, ast.BinOp) and not str(getattr(first, "value", "")
                                                         ).startswith("level:"):
            add(mod, pair, first, stated[0][len("level:"):])
    for node in mod.tree.body:  # USAGE_REASONS = {code: ...}: codes named by their role
      if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith(
          "REASONS") for t in node.targets):
        for key in getattr(node.value, "keys", None) or getattr(node.value, "elts", []):
          add(mod, key, key, None, made=False)
    for node in ast.walk(mod.tree):
      if _call_name(node) in wrappers:
        assert isinstance(node, ast.Call)
        expr = _arg(node, wrappers[_call_name(node)], "reason")
        if expr is not None:
          add(mod, node, expr, None)
  return uses, problems


def _module_name(path: Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources() -> Dict[str, str]:
  return {_module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _package_scan() -> Tuple[List[Use], List[str]]:
  uses, problems = scan(package_sources())
  assert not problems, "reasons the scan cannot resolve (teach it the pattern):\n" + \
      "\n".join(problems)
  assert len({u.code for u in uses if u.made}) >= 60, "the scan found too few codes: broken?"
  return uses, problems


def test_every_code_used_is_catalogued():
  uses, _ = _package_scan()
  missing = sorted({f"{u.module}:{u.line}: {u.code}" for u in uses
                    if u.code not in reasons.CATALOGUE})
  assert not missing, "reason codes missing from beam_tfrecord/reasons.py CATALOGUE:\n" + \
      "\n".join(missing)


def test_every_catalogued_code_is_used():
  uses, _ = _package_scan()
  stale = sorted(set(reasons.CATALOGUE) - {u.code for u in uses if u.made})
  assert not stale, f"catalogued reason codes no module makes any more: {stale}"


def test_stated_levels_are_catalogued():
  """Where the code states a level beside the reason, the catalogue lists it (levels given
  where an InputError is caught are the catalogue's own record)."""
  uses, _ = _package_scan()
  wrong = sorted({f"{u.module}:{u.line}: {u.code} at level {u.level}" for u in uses
                  if u.level and u.code in reasons.CATALOGUE
                  and u.level not in reasons.CATALOGUE[u.code].levels})
  assert not wrong, "levels missing from the catalogue:\n" + "\n".join(wrong)


def test_catalogue_is_well_formed():
  assert (reasons.LEVELS, reasons.STAGES) == (model.LEVELS, model.STAGES)
  for code, reason in reasons.CATALOGUE.items():
    assert code == reason.code and code.isidentifier() and code == code.lower(), code
    assert reason.levels and set(reason.levels) <= set(reasons.LEVELS), code
    assert reason.meaning and "\n" not in reason.meaning and "|" not in reason.meaning, code


# unexpected_error's stage says where the unforeseen happened (a parser, the encoder): the one
# code made at more than one stage
SEVERAL_STAGES = {"unexpected_error"}


def stages(sources: Dict[str, str]) -> Dict[str, Set[str]]:
  """{code: 'stage at module:line' for each place an ErrorRecord or InputError states both}."""
  modules = {name: _Module(name, ast.parse(text, name)) for name, text in sources.items()}
  found: Dict[str, Set[str]] = {}
  for mod in modules.values():
    for node in ast.walk(mod.tree):
      name = _call_name(node)
      if name not in ("ErrorRecord", "InputError"):
        continue
      assert isinstance(node, ast.Call)
      reason = _arg(node, 2, "reason") if name == "ErrorRecord" else _arg(node, 1, "reason")
      stage = _arg(node, 1, "stage") if name == "ErrorRecord" else _arg(node, 0, "stage")
      if reason is None or stage is None or _passed_on(reason) or _passed_on(stage):
        continue
      try:
        codes, said = _strings(reason, mod, modules), _strings(stage, mod, modules)
      except _Unresolved:  # a wrapper's parameter: the wrapper states the stage
        continue
      for code in codes:
        found.setdefault(code, set()).update(f"{s} at {mod.name}:{node.lineno}" for s in said)
  return found


def test_each_reason_has_one_stage():
  """A reason is rejected at the same stage whichever format finds it (the stage says where,
  the reason what: the same problem is not filed under two stages)."""
  found = stages(package_sources())
  assert len(found) >= 60, "the scan found too few codes: broken?"
  several = {code: sorted(places) for code, places in found.items()
             if code not in SEVERAL_STAGES and len({p.split()[0] for p in places}) > 1}
  assert not several, "reasons made at more than one stage:\n" + "\n".join(
      f"{code}: {places}" for code, places in sorted(several.items()))
  # the near-duplicates merged into one reason each (issue 40)
  assert not {"bad_polygon", "mixed_group_labels"} & set(reasons.CATALOGUE)


def test_errors_doc_is_current():
  result = subprocess.run([sys.executable, "-m", "beam_tfrecord.reasons"], capture_output=True,
                          text=True, cwd=str(ROOT), check=True)
  assert result.stdout == reasons.markdown()
  assert (ROOT / "docs" / "errors.md").read_text() == result.stdout, \
      "docs/errors.md is stale: python -m beam_tfrecord.reasons > docs/errors.md"


SNIPPET = '''
from beam_tfrecord.records.model import ErrorRecord, InputError
from beam_tfrecord.prepare.select import EXCLUDED
MADE_UP = "made_up_constant"

def _bad(reason, message):
  return InputError("validate", reason, message)

def pick():
  return None, "from_a_return" if x else "other_return"

def f(e, excluded):
  raise InputError("parse", "made_up_code", "m")

def g(e, excluded):
  _bad("via_wrapper", "m")
  problems = [("warning", InputError("parse", "paired_warning", "m"))]
  yield ErrorRecord(source="s", stage="parse", reason=MADE_UP, message="m", level="file")
  yield ErrorRecord(source="s", stage="parse", reason=EXCLUDED, message="m", key="k")
  _, why = pick()
  yield ErrorRecord(source="s", stage="parse", message="m",
                    reason="chosen" if excluded else why,
                    level="warning" if excluded else "object")
  yield ErrorRecord(source="s", stage="p", reason=e.reason, message="m")
  if e.reason == "compared_only":
    pass
  return [(MADE_UP, 1), ("level:warning", 1)]

def h(name):
  raise InputError("parse", f"computed_{name}", "m")
'''


def test_scan_catches_every_pattern():
  """The scan on a synthetic module: a made-up code, each way a code travels, and a reason
  it cannot resolve (reported, not skipped)."""
  select = 'EXCLUDED = "excluded_from_elsewhere"\n'
  uses, problems = scan({"snippet": SNIPPET, "beam_tfrecord.prepare.select": select})
  found = {(u.code, u.level, u.made) for u in uses}
  assert found == {
      ("made_up_code", None, True), ("via_wrapper", None, True),
      ("paired_warning", "warning", True), ("made_up_constant", "file", True),
      ("excluded_from_elsewhere", "image", True), ("chosen", "warning", True),
      ("from_a_return", "object", True), ("other_return", "object", True),
      ("compared_only", None, False), ("made_up_constant", "warning", True)}
  assert problems == ["snippet:30: reason f'computed_{name}'"]
  assert "made_up_code" not in reasons.CATALOGUE  # so the package test would name it


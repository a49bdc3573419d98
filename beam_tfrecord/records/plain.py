"""Dataclass records <-> plain tuples of their field values, without Beam.

Nested dataclasses, Optional[...] of them and Tuple[dataclass, ...] become tuples too, so a
record becomes a tuple of str/int/float/bool/None/bytes: what Beam's C primitives coder and
pickle handle fastest. The layout comes from `dataclasses.fields` and the field type hints, so
a field added to ImageAnnotation or ObjectAnnotation is carried without touching this module.
Used by coders.DataclassCoder (shuffles) and packed.py (the shard writer's records); shard
writer processes import this module without Beam.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Callable, Dict, List, Tuple, Type

_Convert = Callable[[Any], Any]


# {record type: the names of its (to plain, from plain) functions}
_Made = Dict[type, Tuple[str, str]]


def _expressions(hint: Any, var: str, made: _Made, namespace: Dict[str, Any]
                 ) -> Tuple[str, str]:
  """(to plain, from plain): Python expressions converting the value `var` of type `hint`;
  dataclasses, Optional[...] of them and Tuple[..., ...] are converted (a tuple field is
  made a tuple), everything else travels as it is."""
  if dataclasses.is_dataclass(hint):
    to, back = _functions(hint, made, namespace)
    return f"{to}({var})", f"{back}({var})"
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if origin is typing.Union and type(None) in args:
    inner = [a for a in args if a is not type(None)]
    if len(inner) == 1:
      to, back = _expressions(inner[0], var, made, namespace)
      if to == var:
        return var, var
      return (f"(None if {var} is None else {to})", f"(None if {var} is None else {back})")
  if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
    to, back = _expressions(args[0], "e", made, namespace)
    if to == "e":
      return f"tuple({var})", f"tuple({var})"
    return f"tuple([{to} for e in {var}])", f"tuple([{back} for e in {var}])"
  return var, var


def _functions(cls: Type, made: _Made, namespace: Dict[str, Any]) -> Tuple[str, str]:
  """The names of `cls`'s two converters in `namespace`, defined there (with those of the
  records it nests) on first use."""
  if cls in made:
    return made[cls]
  n = len(made)
  to, back, new = f"_to{n}", f"_from{n}", f"_cls{n}"
  made[cls] = to, back
  namespace[new] = cls
  hints = typing.get_type_hints(cls)
  fields = dataclasses.fields(cls)
  names: List[str] = list(field_names(cls))
  pairs = [(_expressions(hints[name], f"r.{name}", made, namespace)[0],
            _expressions(hints[name], f"v[{i}]", made, namespace)[1])
           for i, name in enumerate(names)]
  direct = (len(names) == len(fields) and not hasattr(cls, "__post_init__") and
            not hasattr(cls, "__slots__"))
  if direct:  # the frozen fields straight into __dict__, in field order
    body = f"  r = _new({new})\n  d = r.__dict__\n" + "".join(
        f"  d[{name!r}] = {value}\n" for name, (_, value) in zip(names, pairs)) + "  return r\n"
  else:
    body = f"  return {new}({', '.join(value for _, value in pairs)})\n"
  source = (f"def {to}(r):\n  return ({''.join(t + ', ' for t, _ in pairs)})\n"
            f"def {back}(v):\n{body}")
  exec(source, namespace)  # noqa: S102 (code made here from field names only)
  return to, back


def field_names(cls: Type) -> Tuple[str, ...]:
  """The names of `cls`'s fields in its plain tuples, in order: field i of a tuple is the
  i-th name (what a reader of the tuples indexes by)."""
  return tuple(f.name for f in dataclasses.fields(cls) if f.init)


@functools.lru_cache(maxsize=None)
def record_converters(cls: Type) -> Tuple[_Convert, _Convert]:
  """(record -> tuple, tuple -> record), as functions written for `cls`'s fields: one
  attribute read or one __dict__ store per field, nested records by their own such functions
  (a frozen dataclass's __init__ sets its fields one object.__setattr__ at a time). Measured
  per small-image ImageAnnotation with two objects (loaded 2-core machine, interleaved
  medians): tuple -> record 5.9 -> 2.7 us, record -> tuple 2.7 -> 1.8 us, against the earlier
  attrgetter/zip converters."""
  namespace: Dict[str, Any] = {"_new": object.__new__}
  to, back = _functions(cls, {}, namespace)
  return namespace[to], namespace[back]


@functools.lru_cache(maxsize=None)
def maker(cls: Type) -> Callable[..., Any]:
  """A constructor of `cls` with its __init__'s signature that fills the new record's __dict__
  directly; `cls` itself where __init__ does more than set fields (__post_init__, slots,
  init=False fields, default factories). For records made per image (write/images.py):
  ImageInfo 2.0 -> 0.6 us (loaded 2-core machine, medians)."""
  fields = dataclasses.fields(cls)
  if (hasattr(cls, "__post_init__") or hasattr(cls, "__slots__") or
      any(not f.init or f.default_factory is not dataclasses.MISSING for f in fields)):
    return cls
  namespace: Dict[str, Any] = {"__new": object.__new__, "__cls": cls}
  params = []
  for i, f in enumerate(fields):
    if f.default is dataclasses.MISSING:
      params.append(f.name)
    else:
      namespace[f"__default{i}"] = f.default
      params.append(f"{f.name}=__default{i}")
  source = (f"def make({', '.join(params)}):\n  __r = __new(__cls)\n  __d = __r.__dict__\n" +
            "".join(f"  __d[{f.name!r}] = {f.name}\n" for f in fields) + "  return __r\n")
  exec(source, namespace)  # noqa: S102 (code made here from field names only)
  return namespace["make"]


@functools.lru_cache(maxsize=None)
def tuple_maker(cls: Type) -> Callable[..., Tuple]:
  """A function with the signature of `cls`'s __init__ that returns the record's plain tuple
  (its fields in order, nested records given as their tuples already): for a source that
  makes records only to give them as tuples (sources/coco/join.py), without the object and
  its conversion."""
  fields = [f for f in dataclasses.fields(cls) if f.init]
  namespace: Dict[str, Any] = {}
  params = []
  for i, f in enumerate(fields):
    if f.default is not dataclasses.MISSING:
      namespace[f"__default{i}"] = f.default
      params.append(f"{f.name}=__default{i}")
    elif f.default_factory is not dataclasses.MISSING:
      raise TypeError(f"{cls.__name__}.{f.name} has a default factory")
    else:
      params.append(f.name)
  source = (f"def make({', '.join(params)}):\n"
            f"  return ({''.join(f.name + ', ' for f in fields)})\n")
  exec(source, namespace)  # noqa: S102 (code made here from field names only)
  return namespace["make"]

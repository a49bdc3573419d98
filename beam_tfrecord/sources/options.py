"""What a format's reader gets of the run's settings: SourceOptions, not the whole config.

Every format reads its inputs, their image roots and the path rules (COMMON); beyond those a
format declares the settings it reads in its module's OPTIONS (csv: `columns`,
`csv_normalized`; voc: `image_sets`, `split`; ...), and gets them typed, as ConvertConfig
parsed them once. Reading a setting it did not declare is an AttributeError naming the format,
so a reader cannot come to depend on an option unseen. Small and picklable: the Beam
transforms carry it to the workers. Pure and Beam-free.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

# (split or None, annotation uri, image root or None)
InputRoot = Tuple[Optional[str], str, Optional[str]]

# ConvertConfig settings every format may read
COMMON = ("format", "inputs", "images", "allow_absolute_paths", "follow_symlinks",
          "include_masks")


@dataclasses.dataclass(frozen=True)
class SourceOptions:
  """The settings one format reads. `input_roots` pairs each --input with its --images root
  (None where it has none: ConvertConfig.input_image_roots); `file_roots` defaults that root
  to the annotation file's directory (ConvertConfig.file_inputs). `declared` holds the
  format's OPTIONS, read as attributes."""
  format: str
  inputs: Tuple[str, ...]
  images: Tuple[str, ...]
  allow_absolute_paths: bool
  follow_symlinks: bool
  include_masks: bool
  input_roots: Tuple[InputRoot, ...] = ()
  file_roots: Tuple[Tuple[Optional[str], str, str], ...] = ()
  declared: Dict[str, Any] = dataclasses.field(default_factory=dict)
  roots_error: str = ""  # why the inputs and image roots do not pair up (raised on use)

  def __getattr__(self, name: str) -> Any:
    # only for names that are not fields: a declared option, else a clear refusal
    declared = self.__dict__.get("declared")
    if name.startswith("__") or declared is None:  # pickling, copying: no such attribute
      raise AttributeError(name)
    if name in declared:
      return declared[name]
    raise AttributeError(f"format {self.format} reads the setting {name!r} without declaring "
                         f"it: add it to its module's OPTIONS")

  def input_image_roots(self) -> List[InputRoot]:
    if self.roots_error:
      raise ValueError(self.roots_error)
    return list(self.input_roots)

  def file_inputs(self) -> List[Tuple[Optional[str], str, str]]:
    if self.roots_error:
      raise ValueError(self.roots_error)
    return list(self.file_roots)


def of(config: Any, declared: Sequence[str]) -> SourceOptions:
  """The SourceOptions of a ConvertConfig for a format declaring `declared` (its OPTIONS).
  The pairing of inputs and image roots is computed here once (ValueError when they do not
  pair up, raised where they are used, as ConvertConfig does)."""
  try:
    input_roots, file_roots, error = config.input_image_roots(), config.file_inputs(), ""
  except ValueError as e:
    input_roots, file_roots, error = [], [], str(e)
  return SourceOptions(
      format=config.format, inputs=tuple(config.inputs), images=tuple(config.images),
      allow_absolute_paths=config.allow_absolute_paths, follow_symlinks=config.follow_symlinks,
      include_masks=config.include_masks, input_roots=tuple(input_roots),
      file_roots=tuple(file_roots), roots_error=error,
      declared={name: getattr(config, name) for name in declared})

"""Annotation sources, one module per format (a folder for the large ones).

Each module holds pure parse functions (testable without Beam) and one PTransform that turns a
pipeline root into `SourceOutput(images, errors, categories)`:
  images:      PCollection[ImageAnnotation] with split (if the source has one), objects grouped
  errors:      PCollection[ErrorRecord] for every record that could not be used
  categories:  PCollection[(name, id)] when the format carries ids (COCO) or an ordered class
               list (YOLO names, class folders), else None
Every format module implements the source protocol that registry.py describes (OPTIONS,
detect, check, possible_splits, read, fingerprint_patterns). Also here:
  registry.py  the formats, one line each, and the lookups through them
  options.py   SourceOptions: what a format gets of the config (COMMON + its OPTIONS)
  depth.py     the one nesting guard of the JSON and XML formats
  detect.py    --format auto
  checks.py    input checks shared by the formats (Beam-free)
  base.py      SourceOutput and helpers the formats share
"""

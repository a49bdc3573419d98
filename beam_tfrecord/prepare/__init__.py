"""Prepare: from a source's images to located images with a split, and the label map.

In: PCollection[ImageAnnotation] straight from a source. Out: images with a file size and a
split (duplicates dropped or routed), ErrorRecords for missing files, and {name: id}.
  locate.py     PrepareImages (Beam)
  bounds.py     the objects-per-image backstop PrepareImages applies (pure)
  splitting.py  split names, --split fractions, the hash that assigns a split (pure)
  labels.py     BuildLabelMap (Beam)
  select.py     SelectClasses (Beam), class_selection.py: --classes/--class-map (pure)
"""

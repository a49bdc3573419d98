"""Encoders from (ImageAnnotation, image bytes) to tf.train.Example, one module per schema."""

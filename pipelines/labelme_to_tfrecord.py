"""labelme annotations to sharded TFRecords: `python -m pipelines.labelme_to_tfrecord --input ... --output ...`."""
import sys

from beam_tfrecord.cli import main


def run(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  return main(["convert", "--format", "labelme", *argv])


if __name__ == "__main__":
  sys.exit(run())

"""beam-tfrecord: installable package, console script, and Beam's --setup_file for Dataflow."""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "beam_tfrecord", "__init__.py")) as f:
  VERSION = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)

setup(
    name="beam-tfrecord",
    version=VERSION,
    description="Labelled image datasets (COCO, Pascal VOC, TF OD CSV) to sharded TFRecords "
    "with Apache Beam",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    if os.path.exists(os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # pipelines/ (thin `python -m pipelines.X` entry points) ships in the sdist that Dataflow
    # stages (MANIFEST.in) but is not installed as a top-level package named `pipelines`
    packages=find_packages(include=["beam_tfrecord", "beam_tfrecord.*"]),
    install_requires=[
        # one Beam version everywhere: the SDK here, Dataflow's images (deploy/dataflow), Prism
        # and the workers' Python boot (Go modules at the same tag, deploy/engines/setup.sh), and
        # Beam's Python container pins the engines' worker image follows. A job server must
        # match its SDK (issue 39, item 5; docs/engines.md#versions); moving this moves them all.
        "apache-beam[gcp]==2.78.0",
        "tensorflow>=2.16,<3",
        "pillow>=10",
        "pandas>=2",
        "google-crc32c>=1.5",   # fast CRC32C for TFRecord framing (Beam falls back to pure Python)
        "ijson>=3.2",           # streaming COCO JSON
        "defusedxml>=0.7",      # VOC XML without entity expansion
        "pyyaml>=6",            # YOLO data.yaml
        "protobuf>=4.21",
        "pyarrow",              # the catalog of versions (storage/catalog.py); Beam pins its range
        # --file-format array_record (storage/record_files.py). Below 0.8.3: from 0.8.3 the
        # package's writer goes through a 16 MB buffer it does not let us size, and the kernel's
        # copy from it cost 1.28-1.32x TFRecord's wall time against 0.8.2's 1.10-1.17x
        # (benchmarks/run.py, 20,000 photos; docs/performance.md#arrayrecord). Same file bytes.
        "array-record>=0.5,<0.8.3",
        "rich>=13",             # progress line on terminals
        "pycocotools>=2.0.7",   # --include-masks: COCO polygon/RLE rasterization (the reference)
        "numpy>=1.24",
    ],
    extras_require={
        "plots": ["matplotlib>=3.7"],  # beam-tfrecord inspect --plot
        "dev": ["pytest>=8", "pytest-xdist>=3", "hypothesis>=6",
                # the tests load --layout tfds outputs with TFDS itself (never a runtime need)
                "tensorflow-datasets>=4.9.4", "importlib_resources>=6",
                "gcp-storage-emulator>=2026.7",  # tests/storage/test_gcs.py: gs:// offline
                "matplotlib>=3.7",  # the tests draw `inspect --plot` too
                # tests/e2e/test_readers.py reads outputs with the consumers' own code: Grain
                # (JAX), the `tfrecord` package and NVIDIA DALI (CPU only; Linux x86-64 wheels)
                "grain>=0.2", "tfrecord>=1.14",
                "nvidia-dali-cuda120>=1.40; platform_system == 'Linux' and "
                "platform_machine == 'x86_64'"],
    },
    entry_points={"console_scripts": ["beam-tfrecord=beam_tfrecord.cli:console"]},
)

"""The flags every benchmark shares, defined when a benchmark imports its helpers.

Imported (through _machine.py and _reports.py) before absl parses the command
line, so --json, --png, --repeats, --wait_quiet and --quiet_load exist in each
script; TensorFlow's C++ INFO/WARNING lines are off unless the caller set them.
"""

import os

from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FLAGS = flags.FLAGS
flags.DEFINE_string("json", None, "Write the results here as JSON.")
flags.DEFINE_string("png", None, "Write a small plot of the results here (PNG).")
flags.DEFINE_integer("repeats", 3, "Timed repeats per measurement; the median is reported.")
flags.DEFINE_float(
    "wait_quiet",
    0,
    "Before measuring, wait up to this many seconds for the 1-minute load average to drop "
    "below --quiet_load (other jobs on the machine skew every figure). 0: do not wait.",
)
flags.DEFINE_float("quiet_load", 0.6, "1-minute load average regarded as a quiet machine.")

"""The machine under the process: what its CPU computes natively, its malloc, its storage.

Each is read from the host itself (/proc, the C library, a path's scheme), never from
TensorFlow, so keras_tpu's import can ask before TensorFlow loads.

Modules, in reading order:
  cpu_features.py   what the host CPU computes natively (bf16), from /proc/cpuinfo
  host_malloc.py    glibc's malloc kept from faulting a step's memory in again: the scripts
                    start again with GLIBC_TUNABLES set (KERAS_TPU_MALLOC); what a process
                    started with (describe(), summary.json)
  storage.py        where a path lives: this host's disk or remote storage (is_remote)

Entry points: `cpu_features.read_cpu_features` (runtime/device_rules.py), `host_malloc`
(keras_tpu/__init__.py, first; scripts/flag_utils.py asks for it), `storage.is_remote` (every
reader and writer of a path).
"""

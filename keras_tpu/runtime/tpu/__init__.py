"""This host's TPU: its address checked, connected once, refused when it cannot work.

TensorFlow waits forever on a TPU nobody answers and wipes TPU memory when initialised twice;
these modules bound every wait, initialise once per process and address, and say which
build, libtpu, holder or Python stops a TPU, without touching it.

Modules, in reading order:
  tpu_address.py   what a TPU address may look like, and whether anything answers at it
  tpu_connect.py   connect and initialise a TPU system once per process, with timeouts
  tpu_health.py    tpu_blockers: the TensorFlow build, libtpu, holder and Python checks
  tpu_holders.py   who holds this host's TPU: libtpu's lock file and open device files

Entry points: `tpu_connect.connect_tpu` (strategy/strategy_builders.py),
`tpu_health.tpu_blockers` and its checks, `tpu_address` (strategy/, readiness/doctor.py).
"""

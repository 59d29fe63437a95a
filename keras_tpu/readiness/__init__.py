"""Will the TPU work: the doctor, build and libtpu checks, and the TPU compile rehearsal.

Everything here answers before TPU time is spent, on any machine, bounded in time, and
reports a problem with its fix instead of raising; the resolver refuses a TPU with the same
checks (runtime/tpu/tpu_health.py).

Modules, in reading order:
  doctor.py              doctor(): one ok / warn / fail line per check, with the fix
  settings_checks.py     the doctor's checks of what the user set (TPU address, TF_CONFIG)
  tpu_init_probe.py      initialise this host's TPU in a child process, bounded in time
  tpu_rehearsal.py       rehearse a TPU compile on the CPU: rehearse_tpu, rehearse_or_raise
  rehearsal_findings.py  the rules that turn a traced step into Findings
  rehearsal_report.py    Finding, RehearsalReport, TPURehearsalError: what the rehearsal says
  graph_inspect.py       traced graphs: nested functions, dtypes, registered XLA kernels

Entry points: `doctor.doctor` (public: keras_tpu.doctor; scripts/tpu_info.py --doctor),
`tpu_rehearsal.rehearse_or_raise` (engine/steps/compiling.py, for RunConfig.rehearse_tpu).
"""

"""The acceptance command: every TPU claim of the docs checked on the user's chip, one report.

`python scripts/tpu_acceptance.py --quick` (or `keras_tpu.acceptance(job=...)` in a notebook)
runs the steps below, each bounded in time and printing one line (ok, fail with the cause,
the fix and the doc line it contradicts, or skip with the reason), then writes
acceptance.json (a versioned schema) and acceptance.md beside it. On a CPU
(`--cpu_replicas=4`) it is a rehearsal: TPU-only steps skip with their reason; on a chip
the rehearsal's figures stand beside the chip's in acceptance.md.
docs/verification.md names, for each TPU path not exercised in CI, the step that does.

Modules, in reading order:
  run.py          acceptance(): the steps in order, the report written whatever happens
  steps.py        the steps (STEPS): environment, doctor, strategy, compile rehearsal, TPU
                  compile, step rates, TPU memory, bf16, Pod slice, main job, resume, evaluation
  probe_steps.py  the steps measuring the job's model: fine-tuning rate and MFU, bf16 logits,
                  the memory planner against the measured peak, the host input rates
  pod_steps.py    several hosts: every host joined (the cluster's list), the stop protocol on
                  SIGTERM to task 0 (one line, the backup of the agreed step)
  probes.py       ModelProbes (public): what a model family gives those steps to run
  step_runner.py  Step, Context, Finding and run_step: one step within its time bound
  main_job.py     AcceptanceJob (a registered task and its bar) and run_child: one run in a child
  job_child.py    the child process of a main-job run (fit, then the export re-evaluated)
  steps_child.py  the child process running in-process steps away from the parent (TPU hosts)
  report.py       StepResult, Report, SCHEMA_VERSION, problems(): acceptance.json and .md
                  (the CPU rehearsal's figures beside the chip's)
  claims.py       Claim: the doc line each step checks, cited in a failing step

Entry points: `run.acceptance` (public: keras_tpu.acceptance; scripts/tpu_acceptance.py),
`main_job.AcceptanceJob` (public: keras_tpu.AcceptanceJob; models.acceptance_job() builds one),
`probes` (public: models/acceptance_probes.py gives BERT's and the host pipelines').
"""

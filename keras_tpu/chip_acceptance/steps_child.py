"""The child process that runs acceptance steps in a process of their own (run.run_in_child).

  python -m keras_tpu.chip_acceptance.steps_child '<spec JSON>'

Each step's StepResult is appended to the spec's result file as one JSON line as it ends,
so a step that kills the child still leaves the ones before it reported.
"""

import dataclasses
import json
import sys

from keras_tpu.chip_acceptance import main_job
from keras_tpu.chip_acceptance import step_runner
from keras_tpu.chip_acceptance import steps as steps_lib


def main(spec):
    context = step_runner.Context(quick=spec["quick"], cpu_replicas=spec["cpu_replicas"],
                                  output_dir=spec["output_dir"], tpu=spec["tpu"],
                                  job=main_job.AcceptanceJob(**spec["job"]) if spec["job"] else None)  # fmt: skip
    with open(spec["result"], "w", encoding="utf-8") as f:
        for step in steps_lib.STEPS:
            if step.name not in spec["names"]:
                continue
            result = step_runner.run_step(step, context)
            f.write(json.dumps(dataclasses.asdict(result), default=str) + "\n")
            f.flush()
        environment = context.shared.get("environment", {})
        f.write(json.dumps({"name": "environment_block", "environment": environment}, default=str) + "\n")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

"""The acceptance command's main job: the digits CNN, to the README's bar.

  import keras_tpu, models
  keras_tpu.acceptance(job=models.acceptance_job())   # scripts/tpu_acceptance.py does this

--full trains the README's run (30 epochs, >= 0.95 test accuracy); --quick trains 4 epochs
at a higher learning rate and holds them to 0.85, a bar the seed CNN clears on 1 to 8
replicas (0.93 measured on 4 CPU replicas) while a broken run does not (chance is 0.10).
"""

import keras_tpu

# The fields every acceptance run of the CNN shares: the seed CNN (no dropout, no BatchNorm:
# the reference of tests/test_faults_resume.py) on digits, 16 examples per replica.
_COMMON = {"dataset": "digits", "variant": "seed", "per_replica_batch_size": 16}


def acceptance_job():
    """Return the keras_tpu.AcceptanceJob of the digits CNN (task "cnn")."""
    return keras_tpu.AcceptanceJob(
        task="cnn",
        imports=("models",),
        quick_fields={**_COMMON, "epochs": 4, "learning_rate": 3e-3},
        full_fields={**_COMMON, "epochs": 30},
        metric="accuracy",
        quick_bar=0.85,
        full_bar=0.95,
        description="digits CNN (seed variant)",
        probes="models.acceptance_probes:PROBES",
    )

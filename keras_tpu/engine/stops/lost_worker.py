"""The lost-worker line: a cluster's failed collective said as one line naming the peer.

A worker that dies or stops is caught by TensorFlow's coordination-service heartbeats, and
the others' collectives fail (runtime/strategy/cluster.FAILURE_ERRORS); a stuck one by the
run's watchdog (runtime/strategy/collective_deadline.py). `worker_failure` turns that error
into one ClusterError naming the lost peer, the phase, TensorFlow's reason (cut at a word;
the log has it whole) and where a restart resumes. training_run.py raises it as
`stop.Stop.lost_worker`; rundir/worker_agreement.py when a worker is lost while they compare.
"""

import logging
import re

import tensorflow as tf

from keras_tpu.runtime.strategy.cluster import ClusterError

log = logging.getLogger(__name__)


def _reason(message):
    """Return the line of a TensorFlow error message that says what happened."""
    # Graph errors open with "Graph execution error:" and the Python stack of
    # the op (indented lines); the runtime's own words come after them.
    skip = ("Graph execution error", "Detected at node", "Additional GRPC error")
    for line in message.splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith(skip):
            return re.sub(r"\{\{function_node [^}]*\}\}\s*", "", line).strip()
    return None


REASON_CHARS = 300  # The longest TensorFlow reason the lost-worker line quotes.


def cut_at_word(text, limit=REASON_CHARS):
    """Return `text`, or its first words within `limit` characters and "..." after them."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    space = cut.rfind(" ")
    if space > 0 and not text[limit - 3].isspace():  # Drop the word the limit falls in.
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "..."


def worker_failure(
    error, info, model_dir=None, backup=True, saved_step=None, phase="during training"
):
    """Return a ClusterError explaining a collective's failure, naming the peer if known.

    Args:
      error: the tf.errors.OpError training raised.
      info: the StrategyInfo of the multi-worker strategy.
      model_dir: the run directory, to say where a restart resumes from.
      backup: whether backups were on.
      saved_step: the step of the last backup (every worker saves and restores the same
        steps, so each knows it); 0: none yet, a restart starts from step 0; None: unknown
        (lost before the restore).
      phase: when the worker was lost, as the line says it ("during training").
    """
    message = str(getattr(error, "message", error))
    this = info.role.cluster
    hosts = this.jobs
    who = "a worker"
    for job, index in re.findall(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)", message):
        if (job, int(index)) != (this.task_type, this.task_index):
            addresses = hosts.get(job) or []
            address = addresses[int(index)] if int(index) < len(addresses) else None
            who = f"{job} {index}" + (f" ({address})" if address else "")
            break
    kind = type(error).__name__
    reason = _reason(message) or kind
    # The line quotes the reason's first words; the log (--log_level=info) has the error whole.
    log.info("keras_tpu: TensorFlow's error for the lost worker, in full: %s", message)
    if backup and model_dir and saved_step == 0:
        resume = f"nothing was backed up yet, so training restarts from step 0 in {model_dir}"
    elif backup and model_dir:
        step = f" (step {saved_step})" if saved_step else ""
        unknown = " (from step 0 if there is none)" if saved_step is None else ""
        resume = f"training resumes from the last backup{step} in {model_dir}/backup{unknown}"
    else:
        resume = "training starts over (run with model_dir and backups on to resume)"
    if isinstance(error, tf.errors.DeadlineExceededError):
        what = (
            f"{who} did not reach an all-reduce within "
            f"collective_timeout={info.role.collective_timeout} s: it is stuck or far slower "
            f"than this one"
        )
    else:
        what = f"the cluster lost {who} {phase}"
    return ClusterError(
        f"{what} ({kind}: {cut_at_word(reason)}); this is "
        f"{this.task_type} {this.task_index} of {info.workers}. Restart every "
        f"worker with the same flags: {resume}."
    )

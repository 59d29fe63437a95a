"""Tests for keras_tpu/engine/stops/lost_worker.py: the lost-worker line names the peer."""

import logging
import re

from keras_tpu.engine.stops import lost_worker
from tests.test_multiworker import _cluster_info


def test_worker_failure_message_names_the_peer():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    info = _cluster_info()
    error = tf.errors.UnavailableError(
        None,
        None,
        "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at:\n  File x\n\n"
        "Socket closed\nAdditional GRPC error information from remote target "
        "/job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf",
    )
    message = str(lost_worker.worker_failure(error, info, "/runs/a"))
    assert "lost worker 1 (h:2)" in message
    assert "Socket closed" in message
    assert "resumes from the last backup in /runs/a/backup" in message
    assert "training starts over" in str(lost_worker.worker_failure(error, info, None))
    named = str(lost_worker.worker_failure(error, info, "/runs/a", saved_step=22))
    assert "resumes from the last backup (step 22) in /runs/a/backup" in named
    early = str(lost_worker.worker_failure(error, info, "/runs/a", saved_step=0,
                                       phase="before training started"))  # fmt: skip
    assert early.startswith("the cluster lost worker 1 (h:2) before training started (")
    assert early.endswith(
        "nothing was backed up yet, so training restarts from step 0 in /runs/a."
    )


def test_a_long_lost_worker_reason_is_cut_at_a_word_and_logged_whole(caplog):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    words = " ".join(f"word{i:03d}" for i in range(80))  # 639 characters, none a space.
    error = tf.errors.UnavailableError(
        None, None, f"Socket closed {words}\nfrom remote target /job:worker/replica:0/task:1"
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger=lost_worker.__name__):
        line = str(lost_worker.worker_failure(error, _cluster_info(), "/runs/a"))
    reason = re.search(r"\(UnavailableError: (.*?)\); this is", line)[1]
    assert reason.endswith("...") and len(reason) <= lost_worker.REASON_CHARS
    shown = reason[: -len("...")].split(" ")
    assert shown == f"Socket closed {words}".split(" ")[: len(shown)]  # Whole words only.
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert words in caplog.records[0].getMessage() and "task:1" in caplog.records[0].getMessage()
    short = tf.errors.UnavailableError(None, None, "Socket closed /job:worker/replica:0/task:1")
    assert "(UnavailableError: Socket closed /job:worker/replica:0/task:1);" in str(
        lost_worker.worker_failure(short, _cluster_info(), "/runs/a")
    )  # Whole when it fits.

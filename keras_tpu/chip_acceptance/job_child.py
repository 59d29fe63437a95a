"""The child process of a main-job run: import the task's modules, fit, write the result.

  python -m keras_tpu.chip_acceptance.job_child '<spec JSON>'   (main_job.run_child writes it)

The spec names the task, the modules registering it, its config's fields and where to
write {"summary": ..., "evaluation": ...}. With "evaluate", the export is loaded back and
its outputs on the run's evaluation split recomputed in NumPy (evaluate_export). A run that
stops early (keras_tpu.RunStopped: a SIGTERM, another worker's preemption) writes
{"stopped": its line} and exits as the scripts do: its line on stderr, its code (143).
"""

import importlib
import json
import sys

import numpy as np


def evaluate_export(export_dir, eval_data, batch=97):
    """Return the export's accuracy and mean loss on `eval_data`, computed in NumPy.

    The export is loaded as a Keras model and called on batches of `batch` (97: not the
    run's batch, so no padding is shared with the run's own evaluation); the accuracy is
    argmax against the labels and the loss the mean negative log-probability of the label.

    Returns:
      {"examples", "correct", "accuracy", "loss"}.
    """
    from keras_tpu.data.sources import sources  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime.compat import keras  # pylint: disable=g-import-not-at-top

    source = sources.as_source(eval_data)
    features, labels = [], []
    for element in source.open_shard(1, 0, False).batch(1024).as_numpy_iterator():
        features.append(element[0])
        labels.append(element[1])
    x, y = np.concatenate(features), np.concatenate(labels).astype(np.int64).reshape(-1)
    model = keras.models.load_model(export_dir, compile=False)
    p = np.concatenate([np.asarray(model(x[i : i + batch], training=False)) for i in range(0, len(x), batch)])
    correct = int((p.argmax(axis=1) == y).sum())
    picked = np.clip(p[np.arange(len(y)), y].astype(np.float64), 1e-7, 1.0)
    return {"examples": len(y), "correct": correct, "accuracy": correct / len(y),
            "loss": float(-np.mean(np.log(picked)))}  # fmt: skip


def main(spec):
    for module in spec["imports"]:
        importlib.import_module(module)
    from keras_tpu.engine import registry  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine import trainer  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.stops import stop  # pylint: disable=g-import-not-at-top

    entry = registry.get_task(spec["task"])
    config = entry.config_cls(**spec["fields"])
    try:
        summary = trainer.fit(spec["task"], config).to_dict()
    except stop.RunStopped as stopped:
        with open(spec["result"], "w", encoding="utf-8") as f:
            json.dump({"summary": None, "evaluation": None, "stopped": str(stopped)}, f)
        stopped.exit()
    evaluation = None
    if spec["evaluate"]:
        task = entry.build(config)
        if task.preprocess is not None:
            evaluation = {"skipped": "the task preprocesses in its input pipeline, not in the model"}
        else:
            evaluation = evaluate_export(config.export_dir, task.eval_data)
    with open(spec["result"], "w", encoding="utf-8") as f:
        json.dump({"summary": summary, "evaluation": evaluation}, f, default=str)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

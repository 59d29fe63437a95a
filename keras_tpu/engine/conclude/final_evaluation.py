"""A run's final evaluation: the last epoch's when the weights are the same, else one pass.

The last epoch's evaluation already covered every example once with the final weights
when training ended at that epoch's end (its history holds it, restored from the backup
on a resume), so a second full pass would only repeat the same numbers (a MiniLM run
spent 227 s on one). A callback with `final_results(model, last_logs)` adds its own
splits' results (MNLI's mismatched dev set), from `last_logs` (that epoch's val_ logs,
when they are of these weights, else None).
"""

import logging

log = logging.getLogger(__name__)


def last_epoch_logs(backend, trained, weights, checksum):
    """Return the last epoch's val_ logs if they are of the weights now in the model, else None.

    Args:
      backend: the run's built Backend (its shape, its weights' checksum).
      trained: its summary.Trained (history, final_step).
      weights: "final" or "best": the weights loaded for the evaluation and export.
      checksum: weights_checksum of the final weights.
    """
    history = trained.history
    epochs = len(history.get("val_loss", ()))
    if not epochs or trained.final_step != epochs * backend.shape.steps_per_epoch:
        return None  # Training did not end at an evaluated epoch's end.
    if weights != "final" and backend.weights_checksum() != checksum:
        return None  # The best weights of an earlier epoch.
    return {k: v[-1] for k, v in history.items() if k.startswith("val_")}


def final_test(backend, callbacks, trained, weights, checksum):
    """Return the run's summary["test"]: {metric: value, "examples": n}, exact ({} without eval).

    Args:
      backend: the run's built Backend (model, shape, evaluation).
      callbacks: the run's callbacks; those with `final_results` add their splits' results.
      trained: its summary.Trained (history, final_step).
      weights: "final" or "best": the weights loaded for the evaluation and export.
      checksum: weights_checksum of the final weights.
    """
    if not backend.shape.has_eval:
        return {}
    last = last_epoch_logs(backend, trained, weights, checksum)
    test = backend.evaluation_from_logs(last) if last else None
    if test is not None:
        log.info("keras_tpu: the final evaluation is the last epoch's (the same weights)")
    else:
        test = backend.evaluate()
    for callback in callbacks:
        if hasattr(callback, "final_results"):
            test.update(callback.final_results(backend.model, last))
    return test

"""Report more evaluation splits beside the run's own (e.g. MNLI's mismatched dev set)."""

from keras_tpu import data
from keras_tpu import keras


class ExtraEvaluation(keras.callbacks.Callback):
    """At each epoch's end, evaluate `source` exactly and add its metrics to the logs.

    The values land in the epoch's logs as `val_<prefix>_<metric>` (so they are
    printed, written to TensorBoard and kept in the summary's history), and those of
    the weights the run exports in its summary["test"] as `<prefix>_<metric>`
    (`final_results`); the run's `monitor` stays on the main evaluation split.
    """

    def __init__(self, source, prefix, per_replica_batch, preprocess):
        super().__init__()
        self.source, self.prefix = source, prefix
        self.per_replica_batch, self.preprocess = per_replica_batch, preprocess
        self._eval = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        for name, value in self._evaluate(self.model).items():
            logs[f"val_{self.prefix}_{name}"] = value

    def final_results(self, model, last_logs):
        """Return this split's results for the run's summary["test"], as `<prefix>_<metric>`.

        Args:
          model: the model with the weights the run evaluates and exports.
          last_logs: the last epoch's val_ logs if they are of these weights (then
            nothing is evaluated again), else None.
        """
        prefix = f"val_{self.prefix}_"
        results = {k[len(prefix):]: v for k, v in (last_logs or {}).items() if k.startswith(prefix)}
        return {f"{self.prefix}_{k}": v for k, v in (results or self._evaluate(model)).items()}

    def _evaluate(self, model):
        if self._eval is None:  # Under the model's strategy, built once.
            self._eval = data.eval_dataset(
                model.distribute_strategy, self.source, self.per_replica_batch,
                preprocess=self.preprocess,
            )  # fmt: skip
        results = model.evaluate(self._eval.dataset, steps=self._eval.steps, verbose=0,
                                 return_dict=True)  # fmt: skip
        # compile_model's weighted loss counts real examples only; Keras's "loss" does not.
        results["loss"] = results.pop("weighted_loss", results.get("loss"))
        return {name: float(value) for name, value in results.items()}

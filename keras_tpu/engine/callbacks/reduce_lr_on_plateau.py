"""Keras's ReduceLROnPlateau that resumes exactly: its counters are backed up with the run.

The stock callback keeps its counters (`best`, `wait`, `cooldown_counter`) in itself and
resets them in `on_train_begin`, so a resumed run would reduce the learning rate at other
epochs; a Task passing it is refused (stops/early_stopping.refuse_stock_stateful names this
one). This one keeps them through the state protocol (`state_dict`/`load_state_dict`, saved
with every backup by backup/run_records.py). Public: `keras_tpu.ReduceLROnPlateau`, in
`Task(callbacks=[...])` with the stock arguments.
"""

from keras_tpu.runtime.compat import keras


class ReduceLROnPlateau(keras.callbacks.ReduceLROnPlateau):
    """Keras's ReduceLROnPlateau with its counters backed up: a resumed run reduces alike.

    The learning rate it sets lives in the optimizer, which every backup holds; its
    counters (`best`, `wait`, `cooldown_counter`) are reset by the stock
    `on_train_begin`, so the restored ones are applied after it.
    """

    _STATE = ("best", "wait", "cooldown_counter")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._restored = None

    def state_dict(self):
        return {name: float(getattr(self, name)) for name in self._STATE}

    def load_state_dict(self, state):
        self._restored = dict(state)
        for name, value in state.items():
            setattr(self, name, value)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)  # Resets the counters...
        if self._restored is not None:  # ...which a resumed run must keep.
            self.load_state_dict(self._restored)

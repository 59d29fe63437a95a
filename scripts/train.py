"""Train any registered task — the built-ins or your own — from flags and config files.

Your own task, from a module outside keras_tpu (examples/user_tasks.py):
  python scripts/train.py --import=examples/user_tasks.py --task=diabetes_mlp \
    --config_file=examples/diabetes_mlp.yaml --model_dir=/tmp/mlp
A file that names its task (`task:` and `import:` keys, as every run's config.yaml does):
  python scripts/train.py --config_file=/tmp/mlp/config.yaml --model_dir=/tmp/mlp_again
Built-ins, by name or import string:
  python scripts/train.py --task=cnn --dataset=digits --epochs=2
  python scripts/train.py --task=models.cnn.cnn_task:cnn_task --dataset=digits

The task's config class decides the flags: every field of it is a flag and a
config-file key, type-checked with file:line errors (`--helpfull` lists them).
"""

import sys
import traceback

from absl import app
from absl import flags

# flag_utils first: it sets how loud TensorFlow is before TensorFlow loads.
if __package__:  # python -m scripts.train
    from scripts import flag_utils
else:  # python scripts/train.py
    import flag_utils
import keras_tpu  # noqa: E402
import models  # noqa: E402,F401  (registers the model garden's tasks "cnn" and "bert")
from keras_tpu.engine import config_yaml  # noqa: E402
from keras_tpu.engine import registry  # noqa: E402


_HELP = ("--help", "-h", "--helpshort", "--helpfull", "-?")


def _task_entry(argv):
    """Return the TaskEntry that argv names (--task, or the config file's task: key)."""
    config_file = (flag_utils.argv_values(argv, "config_file") or [None])[-1]
    ref = config_yaml.read_task(config_file) if config_file else None
    imports = [*(ref.imports if ref else ()), *flag_utils.argv_values(argv, "import")]
    try:
        registry.import_modules(imports)
    except registry.ImportFailedError as e:
        if flag_utils.argv_values(argv, "log_level")[-1:] == ["debug"]:
            traceback.print_exception(e.__cause__)
        raise
    name = (flag_utils.argv_values(argv, "task") or [ref and ref.task])[-1]
    if not name and any(arg in _HELP for arg in argv):
        # Help without a task: RunConfig's flags, and the tasks there are (below).
        return registry.TaskEntry("(none)", None, keras_tpu.RunConfig, "keras_tpu")
    if not name:
        raise keras_tpu.ConfigError(
            f"name the task: --task=NAME (registered: {', '.join(registry.registered())}) or "
            f"--task=package.module:function, or a --config_file with a `task:` key."
        )
    return registry.get_task(name)


ENTRY = flag_utils.run_or_explain(_task_entry, sys.argv)
# absl's --help prints this module's docstring first: end it with the tasks one can name.
__doc__ += (
    f"\nRegistered tasks: {', '.join(registry.registered())} (with --import=... and "
    f"--config_file's import:, yours). --task=NAME --help lists that task's own flags too.\n"
)
flag_utils.define_flags(ENTRY.config_cls)
flags.DEFINE_string("task", None, "Registered task name, or package.module:function.")
flags.DEFINE_multi_string("import", [], "Module (or .py file) to import first: it registers tasks.")


def main(argv):
    del argv
    config = flag_utils.config_from_flags(ENTRY.config_cls)
    summary = flag_utils.run_or_explain(lambda c: keras_tpu.fit(ENTRY.name, c), config)
    metrics = " ".join(f"{k} {v:.4f}" for k, v in summary["test"].items())
    print(
        f"task {ENTRY.name}: test {metrics or '(no eval data)'} on {summary['test_examples']} "
        f"examples; {summary['replicas']} replica(s), global batch {summary['global_batch']}; "
        f"{flag_utils.train_rate(summary)}"
    )
    flag_utils.print_run(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)

"""Name the new place of a module or name that moved, instead of a bare ImportError.

    >>> from keras_tpu import text
    ImportError: keras_tpu.text moved to keras_tpu.data.text: import it from there.

`keras_tpu/__init__.py` installs `MovedFinder` (an import of a moved module raises
ImportError naming the new place) and each package's `__getattr__` comes from
`getattr_for` (an attribute access raises AttributeError naming it). docs/moved_names.md
lists the same table for people.
"""

import sys

# Old dotted name -> where it lives now (a module, or the public names that replaced it).
MOVED = {
    # Earlier restructure: top-level modules that went into folders.
    "keras_tpu.accelerators": "keras_tpu.runtime.accelerators",
    "keras_tpu.callbacks": "keras_tpu.engine.callbacks",
    "keras_tpu.checkpointing": "keras_tpu.engine.checkpointing",
    "keras_tpu.cluster": "keras_tpu.runtime.cluster",
    "keras_tpu.compat": "keras_tpu.runtime.compat",
    "keras_tpu.config_files": "keras_tpu.engine.config_yaml",
    "keras_tpu.configs": "keras_tpu.engine.run_config (RunConfig is keras_tpu.RunConfig)",
    "keras_tpu.detect": "keras_tpu.runtime.detect",
    "keras_tpu.export": "keras_tpu.engine.saved_model_export",
    "keras_tpu.flops": "keras_tpu.models.bert.bert_flops",
    "keras_tpu.graph_inspect": "keras_tpu.readiness.graph_inspect",
    "keras_tpu.hf_bert": "keras_tpu.models.bert.hf_bert",
    "keras_tpu.logs": "keras_tpu.runtime.logs",
    "keras_tpu.memory": "keras_tpu.parallel.memory",
    "keras_tpu.optimizers": "keras_tpu.engine.optimizers (bert_adamw is keras_tpu.bert_adamw)",
    "keras_tpu.outputs": "keras_tpu.engine.output_paths",
    "keras_tpu.progress": "keras_tpu.engine.progress",
    "keras_tpu.recipe_inputs": "keras_tpu.tasks.datasets",
    "keras_tpu.recipes": "keras_tpu.tasks",
    "keras_tpu.resolver": "keras_tpu.runtime.resolver (resolve_strategy is keras_tpu.resolve_strategy)",
    "keras_tpu.run_dir": "keras_tpu.engine.run_dir",
    "keras_tpu.sharded_training": "keras_tpu.parallel.mesh.run_setup",
    "keras_tpu.sharding": "keras_tpu.parallel.mesh.layout",
    "keras_tpu.sources": "keras_tpu.data.sources",
    "keras_tpu.strategy_info": "keras_tpu.runtime.strategy_info",
    "keras_tpu.text": "keras_tpu.data.text",
    "keras_tpu.tf_build": "keras_tpu.runtime.tf_build",
    "keras_tpu.tpu_connect": "keras_tpu.runtime.tpu_connect",
    "keras_tpu.tpu_holders": "keras_tpu.runtime.tpu_holders",
    "keras_tpu.tpu_init_probe": "keras_tpu.readiness.tpu_init_probe",
    "keras_tpu.tpu_rehearsal": "keras_tpu.readiness.tpu_rehearsal",
    "keras_tpu.training": (
        "keras_tpu.compile_model, keras_tpu.evaluate, keras_tpu.set_precision and "
        "keras_tpu.choose_precision (the module is keras_tpu.engine.compiling)"
    ),
    # This restructure (rooms a newcomer finds in one guess).
    "keras_tpu.engine.training": "keras_tpu.engine.compiling",
    "keras_tpu.engine.configs": "keras_tpu.engine.run_config",
    "keras_tpu.engine.config_files": "keras_tpu.engine.config_yaml",
    "keras_tpu.engine.export": "keras_tpu.engine.saved_model_export",
    "keras_tpu.engine.outputs": "keras_tpu.engine.output_paths",
    "keras_tpu.engine.inputs": "keras_tpu.engine.run_inputs",
    "keras_tpu.tasks.inputs": "keras_tpu.tasks.datasets",
    "keras_tpu.parallel.flops": "keras_tpu.models.bert.bert_flops",
    "keras_tpu.parallel.sharding": "keras_tpu.parallel.mesh.layout",
    "keras_tpu.parallel.sharded_loop": "keras_tpu.parallel.mesh.loop",
    "keras_tpu.parallel.sharded_backend": "keras_tpu.parallel.mesh.backend",
    "keras_tpu.parallel.sharded_export": "keras_tpu.parallel.mesh.export",
    "keras_tpu.parallel.sharded_training": "keras_tpu.parallel.mesh.run_setup",
    "keras_tpu.parallel.mesh_dropout": "keras_tpu.parallel.mesh.dropout",
    "keras_tpu.readiness.tf_build": "keras_tpu.runtime.tf_build",
    "keras_tpu.readiness.tpu_holders": "keras_tpu.runtime.tpu_holders",
    "keras_tpu.readiness.report": "keras_tpu.runtime.health_report",
    "keras_tpu.models.bert_config": "keras_tpu.models.bert.bert_config",
    "keras_tpu.models.bert_encoder": "keras_tpu.models.bert.bert_encoder",
    "keras_tpu.models.bert_hub": "keras_tpu.models.bert.bert_hub",
    "keras_tpu.models.bert_classifier": "keras_tpu.models.bert.bert_classifier",
    "keras_tpu.models.hf_bert": "keras_tpu.models.bert.hf_bert",
}


def message(old):
    """Return the one line that says where `old` went."""
    return f"{old} moved to {MOVED[old]}: import it from there (docs/moved_names.md)."


def getattr_for(package):
    """Return a module `__getattr__` for `package` that names the new place of a moved name."""

    def __getattr__(name):  # pylint: disable=invalid-name
        old = f"{package}.{name}"
        if old in MOVED:
            raise AttributeError(message(old))
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


class MovedFinder:
    """A last-resort import finder: importing a moved module raises ImportError naming the new place."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):  # pylint: disable=unused-argument
        if fullname in MOVED:
            raise ImportError(message(fullname), name=fullname)
        return None


def install():
    """Put MovedFinder last on sys.meta_path (once): real modules are always found first."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())

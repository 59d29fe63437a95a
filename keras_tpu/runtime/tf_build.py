"""Which TensorFlow build, Keras and libtpu are installed, read without touching a TPU.

The facts behind every probe here were measured on this project's machine
against the real wheels (docs/verification.md, tests/test_tpu_install.py):

* The `tensorflow` wheel (and `tensorflow-cpu`) registers the TPU ops' definitions
  but no kernel for them, which surfaces on a TPU VM as "No OpKernel was
  registered to support Op 'ConfigureDistributedTPU' ... Registered devices: [CPU]"
  (googlecolab/colabtools#5203, tensorflow/tensorflow#96203). The probe is the
  host-side TPU compile kernel: `get_registered_kernels_for_op("TPUCompile")` lists
  a CPU kernel with `tensorflow-tpu` 2.20.0 (also with TPU_LOAD_LIBRARY=0, i.e. it
  is compiled in, not loaded from libtpu) and nothing with `tensorflow` 2.20/2.21.
  ConfigureDistributedTPU itself is no probe: its kernel is registered only once
  libtpu has brought up a TPU, so it is empty in both wheels off-TPU.
* Distribution metadata alone is not enough: the README's install leaves both
  `tensorflow` and `tensorflow-tpu` installed (tf-keras depends on `tensorflow`),
  and whichever was installed last owns the files, so the kernel registry is the
  ground truth and metadata names the fix.
"""

import dataclasses
import importlib.metadata
import importlib.util
import os
import sys

# Its CPU kernel (the host side of TPU compilation) exists only in TPU builds.
TPU_PROBE_OP = "TPUCompile"
# The newest tensorflow-tpu (the registry lists nothing later).
TPU_TF = "2.20.0"
# tensorflow-tpu 2.20.0 declares libtpu~=0.0.14, which lets pip pick libtpu 0.0.52;
# `import tensorflow` then aborts the process ("ConfigureDistributedTpuOp_DoWork not
# available in this library"; 0.0.32: "TpuExecutable_FreeMaybeOwningDeviceMemoryArray").
# Measured with nm: libtpu 0.0.21-0.0.31 export all 212 TPU C API functions
# TensorFlow 2.20.0 looks up; not run on a TPU here (docs/verification.md).
LIBTPU_FOR_TPU_TF = "libtpu>=0.0.21,<0.0.32"
# Distributions that can provide the `tensorflow` package, and what they mean here.
TF_DISTRIBUTIONS = ("tensorflow-tpu", "tensorflow", "tensorflow-cpu", "tf-nightly")


@dataclasses.dataclass(frozen=True)
class Installed:
    """What this interpreter has installed, as the TPU checks need it.

    Attributes:
      versions: (distribution, version) for each of TF_DISTRIBUTIONS, tf-keras,
        keras and libtpu that is installed.
      tf_version: tensorflow.__version__ of the imported module.
      tpu_kernels: device types with a kernel for TPU_PROBE_OP ("CPU" in a TPU
        build, empty otherwise), or None when the registry could not be read.
      libtpu_requirement: the libtpu requirement tensorflow-tpu declares
        (e.g. "libtpu~=0.0.14"), or None.
      libtpu_library: path of the libtpu shared library found, or None.
      python: (major, minor) of this interpreter.
    """

    versions: tuple = ()
    tf_version: str = ""
    tpu_kernels: tuple | None = None
    libtpu_requirement: str | None = None
    libtpu_library: str | None = None
    python: tuple = ()

    def version(self, distribution):
        """Return the installed version of `distribution`, or None."""
        return dict(self.versions).get(distribution)

    @property
    def is_tpu_build(self):
        """True/False when the kernel registry was read, None when it was not."""
        return None if self.tpu_kernels is None else bool(self.tpu_kernels)

    @property
    def tf_distributions(self):
        """The installed distributions that provide `tensorflow`, as 'name version'."""
        return [f"{d} {self.version(d)}" for d in TF_DISTRIBUTIONS if self.version(d)]


def _version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _libtpu_requirement():
    try:
        requires = importlib.metadata.requires("tensorflow-tpu") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requires:
        name = requirement.split(";")[0].strip()
        if name.lower().startswith("libtpu") and "extra ==" not in requirement:
            return name.replace(" ", "")
    return None


def _libtpu_library(environ):
    """Return the libtpu.so TensorFlow would load: TPU_LIBRARY_PATH, else the libtpu package."""
    override = environ.get("TPU_LIBRARY_PATH", "").strip()
    if override:
        return override if os.path.isfile(override) else None
    try:
        spec = importlib.util.find_spec("libtpu")
    except (ImportError, ValueError):
        return None
    for directory in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(directory, "libtpu.so")
        if os.path.isfile(path):
            return path
    return None


def tpu_kernels(op=TPU_PROBE_OP):
    """Return the device types with a kernel registered for `op`, or None if unreadable."""
    from keras_tpu.runtime import tf_registries  # pylint: disable=g-import-not-at-top

    try:
        registered = tf_registries.registered_kernels(op)  # Imports TensorFlow: when called.
    except Exception:  # pylint: disable=broad-except  # A probe reports, never raises.
        return None
    return None if registered is None else tuple(sorted({k.device_type for k in registered}))


def installed(environ=None):
    """Return what is installed here (reads metadata and TensorFlow's kernel registry)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    environ = os.environ if environ is None else environ
    names = TF_DISTRIBUTIONS + ("tf-keras", "keras", "libtpu")
    return Installed(
        versions=tuple((n, v) for n in names if (v := _version(n))),
        tf_version=tf.__version__,
        tpu_kernels=tpu_kernels(),
        libtpu_requirement=_libtpu_requirement(),
        libtpu_library=_libtpu_library(environ),
        python=tuple(sys.version_info[:2]),
    )


def check_libtpu_loadable(version=None):
    """Raise ImportError if importing TensorFlow would abort on this libtpu (metadata only).

    Runs before TensorFlow is imported: the abort is a C++ fatal error that kills the
    process (a dead notebook kernel) before any Python error handling can run.
    """
    version = version or _version
    tpu_tf, libtpu = version("tensorflow-tpu"), version("libtpu")
    if tpu_tf != TPU_TF or not libtpu or os.environ.get("TPU_LOAD_LIBRARY") == "0":
        return
    from packaging.specifiers import SpecifierSet  # pylint: disable=g-import-not-at-top

    if libtpu not in SpecifierSet(LIBTPU_FOR_TPU_TF[len("libtpu") :]):
        raise ImportError(
            f"libtpu {libtpu} does not work with tensorflow-tpu {tpu_tf}: importing TensorFlow "
            f"would abort the process (the TPU functions it looks up are missing). Fix: "
            f'pip install "{LIBTPU_FOR_TPU_TF}" and restart the runtime.'
        )

"""Whether a training split is cached in host memory or streamed, decided once and said in one line.

tf.data's in-memory cache keeps every decoded example of a pipeline for the whole run: it
saves reading and parsing after the first pass, and costs host memory in proportion to the
data, about 3x the raw size (measured: 1,504 MB peak RSS with 1.6 M small float examples
against 909 MB with 200 k). A split that does not fit must stream, as TPU input pipelines
usually do. The rule (`cache="auto"`, the default):

  - in-memory arrays are not cached: they are in memory already, a cache would copy them;
  - file sources (TFRecord, tfds) are cached when their estimated size in memory
    (`CACHE_EXPANSION` x their bytes on disk) fits the budget, a share of the host's
    memory (`DEFAULT_BUDGET_SHARE`) unless one is given; else streamed;
  - a source of unknown size (a user's Source without `size_bytes`) is streamed;
  - a function of the InputContext (`function_plan`) builds each replica's batches itself:
    streamed as it builds them, neither cached nor counted by keras_tpu.

`cache="memory"` and `cache="none"` decide for the user; a path caches on that disk.
"""

import dataclasses
import logging
import os

from keras_tpu import checks

log = logging.getLogger(__name__)

MODES = ("auto", "memory", "none")
# Host memory a cached example takes per byte of its file: the measured 3x above
# (tf.data holds each cached element as its own tensors, with their overhead).
CACHE_EXPANSION = 3
# An eighth of the host: the rest holds the model, the shuffle buffer, TensorFlow, the
# prefetch buffers, and other processes of the same host (a TPU VM runs several).
DEFAULT_BUDGET_SHARE = 1 / 8


@dataclasses.dataclass(frozen=True)
class CachePlan:
    """What a training pipeline does with its examples after the first pass, and why.

    Attributes:
      cache: "memory", a file path prefix, or None (stream from the source every pass).
      reason: one line for the run's summary (and its output, when `news`).
      news: the run says `reason` when it starts (not for arrays, which are simply
        in memory already).
    """

    cache: str | None
    reason: str
    news: bool = True

    @property
    def streamed(self):
        return self.cache is None


def host_memory_bytes():
    """Return the host's physical memory in bytes (0 if the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def default_budget_bytes():
    """Return the default cache budget: DEFAULT_BUDGET_SHARE of the host's memory."""
    return int(host_memory_bytes() * DEFAULT_BUDGET_SHARE)


def _mb(num_bytes):
    return f"{num_bytes / 2**20:,.0f} MB"


def plan(source, cache="auto", budget_bytes=None):
    """Return the CachePlan for training on `source`.

    Args:
      source: a data.Source (its `in_memory` and `size_bytes` say what it is).
      cache: "auto", "memory", "none" (or None), or a file path prefix to cache on disk.
      budget_bytes: host memory the cache may take under "auto" (None: the default share).

    Raises:
      ConfigError: an unknown cache mode.
    """
    if cache is None or cache == "none":
        return CachePlan(None, f"training data streamed from {source.name} (cache='none')")
    if cache == "memory":
        return CachePlan("memory", f"training data cached in memory: {source.name} (cache='memory')")
    if cache != "auto":
        if not isinstance(cache, str) or not cache:
            raise checks.ConfigError(
                f"cache={cache!r}: use 'auto', 'memory', 'none' or a file path prefix."
            )
        return CachePlan(cache, f"training data cached on disk at {cache}.pipeline*")
    if source.in_memory:
        return CachePlan(
            None, f"training data in memory already ({source.name}): not cached again", news=False
        )
    budget = default_budget_bytes() if budget_bytes is None else int(budget_bytes)
    where = (
        f"the budget {_mb(budget)}"
        + (f" (1/{round(1 / DEFAULT_BUDGET_SHARE)} of this host's memory)" if budget_bytes is None else "")
    )  # fmt: skip
    if source.size_bytes is None:
        return CachePlan(
            None, f"training data streamed from {source.name}: its size is unknown "
            f"(cache='memory' to cache it)",
        )  # fmt: skip
    needed = CACHE_EXPANSION * source.size_bytes
    if needed <= budget:
        return CachePlan(
            "memory", f"training data cached in memory: {source.name}, about {_mb(needed)} "
            f"({CACHE_EXPANSION}x its {_mb(source.size_bytes)} on disk) within {where}",
        )  # fmt: skip
    return CachePlan(
        None, f"training data streamed from {source.name}: about {_mb(needed)} in memory "
        f"({CACHE_EXPANSION}x its {_mb(source.size_bytes)} on disk) exceeds {where}; "
        f"cache='memory' caches it anyway",
    )  # fmt: skip


def function_plan(dataset_fn):
    """Return the CachePlan of training data given as a function of the InputContext.

    The function batches each replica's examples itself: keras_tpu streams what it
    returns, caches none of it (whatever `cache` says) and cannot count it.
    """
    name = getattr(dataset_fn, "__qualname__", None) or type(dataset_fn).__name__
    return CachePlan(
        None, f"training data streamed from the function {name}(InputContext), per replica: "
        f"keras_tpu neither caches nor counts its examples (cache them in the function)",
    )  # fmt: skip


def check_mode(cache):
    """Raise ConfigError unless `cache` is one of MODES (RunConfig.cache)."""
    checks.one_of("cache", cache, MODES)

"""What the docs promise, quoted: each acceptance step checks one Claim, and a failure names it.

A Claim is a document and a quote from it; its line is found in the document when the
report is written (`locate`), so a failing step reads "docs/guide.md:464: 'a killed run
resumes ...'" and the quote stays true to the file (tests/test_acceptance.py checks every
quote is found).
"""

import dataclasses
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class Claim:
    """A promise of the docs: the document (repository-relative) and the words that make it."""

    doc: str
    quote: str

    def locate(self, repo=REPO):
        """Return the 1-based line of the document where the quote starts, or None.

        Whitespace in the quote matches any run of whitespace (a quote may span a line
        break of the Markdown source); None when the document or the quote is not there
        (an installed package has no docs/).
        """
        try:
            with open(os.path.join(repo, self.doc), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return None
        pattern = r"\s+".join(re.escape(word) for word in self.quote.split())
        match = re.search(pattern, text)
        return None if match is None else text.count("\n", 0, match.start()) + 1

    def cite(self, repo=REPO):
        """Return "doc:line: 'quote'" (without the line when it is not found)."""
        line = self.locate(repo)
        where = self.doc if line is None else f"{self.doc}:{line}"
        return f"{where}: '{self.quote}'"


ENVIRONMENT = Claim("docs/guide.md", "checks that TensorFlow and tf-keras share their minor version")
DOCTOR = Claim("README.md", "Before training, ask the doctor")
STRATEGY = Claim("docs/scaling.md", "`resolve_strategy()` connects and initialises it once")
COMPILE_REHEARSAL = Claim(
    "README.md", "`--rehearse_tpu` compiles the training step for a TPU before a run starts"
)
TPU_COMPILE = COMPILE_REHEARSAL  # The same promise, kept on the chip itself.
MAIN_JOB = Claim("README.md", "(≥ 0.95 test accuracy)")
EXACT_RESUME = Claim("docs/guide.md", "a killed run resumes to the uninterrupted run's checksum")
EXACT_EVALUATION = Claim("docs/guide.md", "**Exact evaluation**: padding weighs 0")
STEPS_PER_EXECUTION = Claim(
    "docs/scaling.md", '`steps_per_execution="auto"` is 100 on TPU: one host round trip per 100 steps.'
)
MEMORY_PLANNER = Claim("docs/memory.md", "peak/estimate: 0.79..0.98, 18/18 within 25%")
TPU_MEMORY_INFO = Claim("docs/verification.md", "HBM sizes and the bf16 peaks MFU divides by")
EMBEDDING_GATHER = Claim("docs/verification.md", "What a TPU does with such a gather")
TPU_MESH = Claim("docs/model_parallel.md", "`planner.estimate(..., model_parallel=K)` gives the per-device bytes")
POD_SLICE = Claim("docs/scaling.md", "`describe()` reports `tpu.num_tasks` (hosts)")
FINE_TUNING_RATE = Claim("docs/guide.md", "examples/second, step time (and MFU for BERT)")
BF16_LOGITS = Claim("docs/guide.md", "`auto` is bf16 on TPU")
HOST_INPUT = Claim("README.md", "input pipeline feeds 188× (CNN) and 374× (BERT tiny) what training consumes.")
BF16_ON_CHIP = Claim("docs/verification.md", "bf16 policy on TPU (`mixed_bfloat16`, float32 outputs)")
POD_STOP = Claim("docs/scaling.md", "a SIGTERM/SIGINT to any worker stops the whole cluster at one step")

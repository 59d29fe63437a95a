"""The acceptance report: one StepResult a step, the environment, acceptance.json and .md.

acceptance.json has a versioned schema (SCHEMA_VERSION; `problems` lists where a mapping
breaks it, which the tests and a reader of a sent report both use). The Markdown summary is
the same report as a table, ready to paste into an issue, then the stand-in comparison: every
step's figures from the CPU rehearsal beside the chip's (`rehearsal`: the steps of a
rehearsal's acceptance.json; a CPU run is its own rehearsal, one column).
"""

import dataclasses
import json
import os

SCHEMA_VERSION = 1
OK, FAIL, SKIP = "ok", "fail", "skip"
STATUSES = (OK, FAIL, SKIP)
JSON_NAME, MARKDOWN_NAME = "acceptance.json", "acceptance.md"


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one step found.

    Attributes:
      name: the step (steps.STEPS).
      status: "ok", "fail" or "skip".
      detail: the finding in words; for a fail, the cause.
      fix: for a fail, what to do (or what to send back).
      figures: the step's measurements, name -> number or short string.
      seconds: how long the step took.
      claim: "doc:line: 'quote'": the promise the step checks (a fail contradicts it).
    """

    name: str
    status: str
    detail: str
    fix: str = ""
    figures: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    claim: str = ""

    def line(self):
        """Return the step as the one line the command prints."""
        text = f"{self.status:<4} {self.name}: {self.detail}"
        if self.status == FAIL:
            text += f" Contradicts {self.claim}." if self.claim else ""
            text += f" Fix: {self.fix}" if self.fix else ""
        return text


@dataclasses.dataclass(frozen=True)
class Report:
    """A whole acceptance run: how it ran, where, and every step's result, in order."""

    mode: str  # "quick" or "full".
    environment: dict
    steps: tuple
    seconds: float = 0.0
    schema_version: int = SCHEMA_VERSION
    rehearsal: tuple = ()  # The CPU rehearsal's StepResults, on a chip (see the module doc).
    rehearsal_note: str = ""  # Why there is no rehearsal column on a chip, if there is none.

    @property
    def on_chip(self):
        """Whether the strategy found is an accelerator's (a CPU run is a rehearsal)."""
        found = next((s for s in self.steps if s.name == "strategy"), None)
        return found is not None and found.figures.get("kind") not in (None, "cpu")

    @property
    def ok(self):
        return all(step.status != FAIL for step in self.steps)

    def to_dict(self):
        return {
            "schema_version": self.schema_version,
            "mode": self.mode,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "environment": self.environment,
            "steps": [dataclasses.asdict(step) for step in self.steps],
            "rehearsal": [dataclasses.asdict(step) for step in self.rehearsal],
            "rehearsal_note": self.rehearsal_note,
        }

    def markdown(self):
        """Return the summary: the environment in one line, then one table row per step."""
        env = self.environment
        where = ", ".join(f"{key} {env[key]}" for key in ENVIRONMENT_HEADLINE if env.get(key))
        counts = {s: sum(step.status == s for step in self.steps) for s in STATUSES}
        lines = [
            f"## keras_tpu acceptance ({self.mode}): "
            + ", ".join(f"{n} {s}" for s, n in counts.items()),
            "",
            f"{where}; {self.seconds:.0f} s; schema {self.schema_version}.",
            "",
            "| step | status | figures | finding | claim |",
            "|---|---|---|---|---|",
        ]
        for step in self.steps:
            figures = ", ".join(f"{k}={_short(v)}" for k, v in step.figures.items())
            finding = step.detail + (f" Fix: {step.fix}" if step.fix and step.status == FAIL else "")
            lines.append(
                f"| {step.name} | {step.status} | {figures} | {_cell(finding)} | {_cell(step.claim)} |"
            )
        return "\n".join(lines + [""] + self.comparison()) + "\n"

    def comparison(self):
        """Return the stand-in comparison's lines: each step's figures, rehearsal beside chip."""
        if not self.on_chip:
            lines = ["### The stand-in's figures (this run is the CPU rehearsal)", "",
                     "| step | figure | CPU rehearsal |", "|---|---|---|"]  # fmt: skip
            for step in self.steps:
                lines += [f"| {step.name} | {k} | {_figure(v)} |" for k, v in step.figures.items()]
            return lines
        lines = ["### The CPU rehearsal beside the chip", ""]
        if not self.rehearsal:
            return lines + [f"No rehearsal column: {self.rehearsal_note or 'no rehearsal given'}."]
        before = {step.name: step for step in self.rehearsal}
        lines += ["| step | figure | CPU rehearsal | chip |", "|---|---|---|---|"]
        for step in self.steps:
            cpu = before.get(step.name)
            cpu_figures = cpu.figures if cpu else {}
            names = list(cpu_figures) + [k for k in step.figures if k not in cpu_figures]
            for name in names:
                lines.append(f"| {step.name} | {name} | {_figure(cpu_figures.get(name, '—'))} | "
                             f"{_figure(step.figures.get(name, '—'))} |")  # fmt: skip
        return lines

    def write(self, output_dir):
        """Write acceptance.json and acceptance.md into output_dir; return the JSON's path."""
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.join(output_dir, JSON_NAME)
        _write_atomically(path, json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        _write_atomically(os.path.join(output_dir, MARKDOWN_NAME), self.markdown())
        return path


ENVIRONMENT_HEADLINE = ("chip", "strategy", "replicas", "tensorflow", "tf_keras", "libtpu", "python")


def _short(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _figure(value):
    """A figure in a comparison cell: numbers short, strings cut (a sha256 to its first 12)."""
    text = _short(value)
    return _cell(text if len(text) <= 24 else text[:12] + "…")


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _write_atomically(path, text):
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temp, path)


_STEP_FIELDS = {
    "name": str, "status": str, "detail": str, "fix": str, "figures": dict,
    "seconds": (int, float), "claim": str,
}  # fmt: skip


def problems(value):
    """Return where `value` (a loaded acceptance.json) breaks the schema; [] when it is valid."""
    found = []
    if not isinstance(value, dict):
        return [f"the report is a {type(value).__name__}, not an object"]
    if value.get("schema_version") != SCHEMA_VERSION:
        found.append(f"schema_version is {value.get('schema_version')!r}, not {SCHEMA_VERSION}")
    for key, kind in (("mode", str), ("ok", bool), ("environment", dict), ("steps", list)):
        if not isinstance(value.get(key), kind):
            found.append(f"{key} is missing or not a {kind.__name__}")
    for i, step in enumerate(value.get("steps") or []):
        if not isinstance(step, dict):
            found.append(f"steps[{i}] is not an object")
            continue
        for key, kind in _STEP_FIELDS.items():
            if not isinstance(step.get(key), kind):
                found.append(f"steps[{i}].{key} is missing or of the wrong type")
        if step.get("status") not in STATUSES:
            found.append(f"steps[{i}].status is {step.get('status')!r}, not one of {STATUSES}")
        if step.get("status") == FAIL and not step.get("claim"):
            found.append(f"steps[{i}] ({step.get('name')}) fails without naming the doc line")
    if not isinstance(value.get("rehearsal", []), list):
        found.append("rehearsal is not a list")
    for i, step in enumerate(value.get("rehearsal") or []):
        if not isinstance(step, dict) or not isinstance(step.get("figures"), dict):
            found.append(f"rehearsal[{i}] is not a step with figures")
    if isinstance(value.get("steps"), list) and isinstance(value.get("ok"), bool):
        failed = any(isinstance(s, dict) and s.get("status") == FAIL for s in value["steps"])
        if value["ok"] == failed:
            found.append(f"ok is {value['ok']} but {'a' if failed else 'no'} step failed")
    return found

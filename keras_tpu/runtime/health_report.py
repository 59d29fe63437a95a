"""The doctor's report: one frozen Check per thing checked, and the Report of them all."""

import dataclasses

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclasses.dataclass(frozen=True)
class Check:
    """One diagnosis: what was checked, what was found, and how to fix it."""

    name: str
    status: str  # OK, WARN or FAIL.
    detail: str
    fix: str = ""

    def line(self):
        """Return the check as one line: status, name, detail and the fix."""
        text = f"{self.status:<4} {self.name}: {self.detail}"
        return f"{text} Fix: {self.fix}" if self.fix and self.status != OK else text


@dataclasses.dataclass(frozen=True)
class Report:
    """All checks of one doctor run."""

    checks: tuple

    @property
    def ok(self):
        return all(c.status != FAIL for c in self.checks)

    @property
    def failures(self):
        return tuple(c for c in self.checks if c.status == FAIL)

    def __str__(self):
        return "\n".join(c.line() for c in self.checks)

    def to_dict(self):
        return {"ok": self.ok, "checks": [dataclasses.asdict(c) for c in self.checks]}

"""The host's time named at the user's lines, as plain data.

During the recorded steps a sampler reads the training thread's Python stack every 10
milliseconds (:mod:`torchboost.observe.record.line_sampler`) and gives the time since its
last look to the innermost frame of the user's own code (not the standard library, not an
installed package, not torchboost): its ``file:line``, the source there, and the call it
was making (the library function it called, ``SummaryWriter.add_histogram``; for a call
into C, which has no frame, the line's own text: ``gc.collect()``). Each is kept per
phase it fell in (``bucket``: "other" for the time outside the loop's phases, "data" for
the in-process data wait, "evaluation", "forward", ...) and per recorded step, so that
the report can give each line's milliseconds over the same typical steps the phase table
uses (:func:`line_rows`).
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["HostLine", "LINE_SHARE_PCT", "line_rows", "where"]

LINE_SHARE_PCT = 5.0
"""A line is shown under its phase when it takes at least this share of the step."""
LOOP_CALLS = ("torch.nn.modules.module.Module._", "torch._tensor.Tensor.backward", "torch.autograd.",
              "torch.optim.", "torch.utils.data.dataloader.", "torch.amp.grad_scaler.", "torch.cuda.amp.")
"""The calls through which the loop enters a phase (a module's call, ``backward``, an
optimizer's step, a DataLoader's next batch): a line making one of them says no more than
its phase does, and the time the sampler finds there outside the phase's own timer is the
phase's entry and exit (torch's wrappers and the observer's hooks), not the script's work."""


@dataclass
class HostLine:
    """One line of the user's code where sampled time fell, in one phase."""

    bucket: str
    """The phase the time fell in: "other" (outside the loop's phases), "data", "forward",
    "backward", "optimizer", "checkpoint", "output" or "evaluation"."""
    file: str
    """The user's file, absolute."""
    line: int
    code: str
    """The source of that line, stripped ("" when it cannot be read)."""
    callee: str
    """What the line was calling: a library function's qualified name
    (``torch.utils.tensorboard.writer.SummaryWriter.add_histogram``), a function of the
    user's own, or "" for time in the line itself (a call into C: see :attr:`code`)."""
    ms_by_step: dict[int, float] = field(default_factory=dict)
    """Sampled milliseconds in each recorded step, by :attr:`StepRecord.index`."""
    via: str = ""
    """The training loop's line that led to this one (``train.py:12``), when this line is in
    a function of the user's own the loop called; "" for a line of the loop itself."""

    def ms_over(self, indexes: Iterable[int]) -> float:
        """Mean milliseconds a step over the steps ``indexes`` (0 for a step it missed)."""
        picked = list(indexes)
        return sum(self.ms_by_step.get(i, 0.0) for i in picked) / len(picked) if picked else 0.0

    @property
    def loop_call(self) -> bool:
        """The line is the loop's own call of a phase (:data:`LOOP_CALLS`)."""
        return self.callee.startswith(LOOP_CALLS)

    @property
    def name(self) -> str:
        """The call in words: the callee's last two names, or the line's own text (its
        comment left out)."""
        if self.callee:
            return ".".join(self.callee.split(".")[-2:])
        return without_comment(self.code)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HostLine":
        """The line :func:`dataclasses.asdict` wrote (JSON turned the step indexes into strings)."""
        return cls(data["bucket"], data["file"], int(data["line"]), data.get("code", ""), data.get("callee", ""),
                   {int(k): float(v) for k, v in data.get("ms_by_step", {}).items()}, data.get("via", ""))


def without_comment(code: str) -> str:
    """One line of Python without its trailing comment (as it is when it does not tokenize)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return code
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    return code[:comment.start[1]].rstrip() if comment is not None else code


def where(line: HostLine) -> str:
    """``train.py:42``: the line's place, its file's name alone."""
    return f"{line.file.rsplit('/', 1)[-1]}:{line.line}"


def line_rows(lines: list[HostLine], indexes: list[int], step_ms: float, *,
              share_pct: float = LINE_SHARE_PCT) -> list[dict[str, Any]]:
    """The lines that take at least ``share_pct`` of a step of ``step_ms`` over the steps
    ``indexes`` (the typical ones), largest first, each as a report row: bucket, where, file,
    line, code, callee, name, ms a step and share."""
    rows = []
    for host_line in lines:
        ms = host_line.ms_over(indexes)
        share = 100.0 * ms / step_ms if step_ms > 0 else 0.0
        if share >= share_pct:
            rows.append({"bucket": host_line.bucket, "where": where(host_line), "file": host_line.file,
                         "line": host_line.line, "code": host_line.code, "callee": host_line.callee,
                         "name": host_line.name, "via": host_line.via, "loop_call": host_line.loop_call,
                         "ms": ms, "pct": share})
    return sorted(rows, key=lambda row: -row["ms"])

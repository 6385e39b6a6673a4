"""Phrases of the tuner's report, shared by report.json, Markdown, HTML and the terminal.

Each takes plain numbers or report.json entries and returns words, so every format says
the same thing the same way. Ratios are candidate step time / incumbent step time
(below 1 is faster); speedups are the inverse.
"""

from __future__ import annotations

import math
from typing import Any

from torchboost._units import bytes_text

_SAME_SPEED = 0.005
"""Ratios within this of 1 read as "the same speed"."""
NOTHING_TO_USE = "nothing changed: run your script as you did before"
"""The next step when tune wrote nothing: `torchboost run` would apply nothing and cost its start-up."""


def unchanged(report: dict[str, Any]) -> str:
    """Why nothing was written, in words: the search's pick did not hold end to end (it was
    faster in the trials), or nothing was faster beyond noise at all; never the second
    beside the first's figure."""
    if (report.get("search_speedup") or 1.0) > 1.0 and report.get("end_to_end"):
        return "the search's pick did not hold end to end: nothing changed"
    return "nothing was faster beyond noise and still correct: nothing changed"


def times(x: float) -> str:
    """A factor as "1.8x", "1.35x", "2x": at most two decimals, no trailing zeros."""
    return f"{x:.2f}".rstrip("0").rstrip(".") + "x"


def vs_baseline(speedup: float) -> str:
    """A waterfall bar's speedup over the baseline, always two decimals: "1.00x", "1.35x"."""
    return f"{speedup:.2f}x"


def speed(ratio: float | None) -> str:
    """ "1.35x faster", "1.8x slower", "the same speed", or "not measured"."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return "not measured"
    if abs(ratio - 1.0) < _SAME_SPEED:
        return "the same speed"
    return f"{times(1.0 / ratio)} faster" if ratio < 1 else f"{times(ratio)} slower"


def memory(n: int | None) -> str:
    """Bytes, compactly ("812 MiB", "12.40 GiB"), in the same form as the search's reasons
    (:func:`torchboost._units.bytes_text`), so a reason and its table cell agree; "–" when
    not measured."""
    return bytes_text(n, "–")


def memory_line(report: dict[str, Any]) -> str | None:
    """The memory limit and the peak before and after, in one line; None when neither a
    limit nor a peak is known. ``report``: a report.json document."""
    mem = report.get("memory") or {}
    before, after, limit = mem.get("before_peak_bytes"), mem.get("after_peak_bytes"), mem.get("limit_bytes")
    if not (before or after or limit):
        return None
    peaks = f"peak memory: {memory(before)} before, {memory(after)} after"
    if not limit:
        return f"{peaks}; no limit: {mem.get('limit_source') or 'unknown'}"
    return f"{peaks}; limit {memory(limit)} ({mem.get('limit_source') or 'given'})"


def mfu_line(report: dict[str, Any]) -> str | None:
    """MFU before and after, of the machine's measured matmul peak, in one line; None when the
    FLOPs of a step or the peak are unknown. ``report``: a report.json document."""
    mfu = report.get("mfu")
    if not mfu or mfu.get("before_pct") is None:
        return None
    after, dtype, after_dtype = mfu.get("after_pct"), mfu["dtype"], mfu.get("after_dtype") or mfu["dtype"]
    if after and after > 100.0:  # the probe ran slower than the step: not a bound to state
        left = "; over 100%: the probe's peak was measured lower than these steps ran (another process beside it?)"
    else:
        left = f"; at most {100.0 / after:.1f}x is left in compute" if after else ""
    of = (f"of this machine's {dtype} matmul peak" if after_dtype == dtype else
          f"of this machine's {dtype} matmul peak before, its {after_dtype} peak after")
    return (f"MFU: {mfu['before_pct']:.0f}% before, {after or 0:.0f}% after, {of} "
            f"({mfu['flops_per_step']:.3g} FLOPs per step){left}")


def steps(n: float) -> str:
    """A step count in words: "4,839 steps"."""
    return f"{math.ceil(n):,} steps"


def break_even(entry: dict[str, Any], run_steps: int | None) -> str | None:
    """When compiling pays for itself, in words; None for levers other than compile.

    ``entry`` is a decision of the tuner's summary (``amortised``: its compile time must
    be repaid). Compile time is repaid once the per-step saving has added up to it; a
    compile that makes steps no faster never pays off.
    """
    if not entry["amortised"]:
        return None
    planned = f" (the run has {steps(run_steps)})" if run_steps else " (the run's length is unknown)"
    n = entry["break_even_steps"]
    if n is not None and math.isinf(n):
        return "never: compiled steps were not faster"
    if entry["status"] == "skipped" and n is not None:
        return f"at least {steps(n)}{planned}"
    if n is not None:
        cold, warm = entry.get("compile_cold_s"), entry.get("compile_warm_s")
        cost = f"; compile {cold:.1f} s cold, {warm:.1f} s warm" if cold is not None and warm is not None else ""
        return f"after {steps(n)}{planned}{cost}"
    if entry["status"] in ("incorrect", "failed"):
        return "not computed: the compiled trial did not produce a usable measurement"
    ratio = entry["ratio"]
    if ratio is not None and ratio >= 1.0:
        return "never: compiled steps were not faster"
    return "not computed: compiled steps were not faster beyond noise"


def verdict(entry: dict[str, Any], pick: str = "tuned") -> str:
    """One line per decision of the tuner's summary, e.g. "bf16 was 1.8x slower here:
    rejected"; ``subject`` names what it was about, as a reader does. ``pick``: what became
    of the search's pick (the summary's ``status``): a change the search kept is said kept
    only where it was written to torchboost.toml ("tuned")."""
    who, status = entry["subject"], entry["status"]
    if status == "kept" and pick != "tuned":
        return _kept_not_written(entry, who, pick)
    if status == "incorrect":
        return f"{who} changed the training loss beyond tolerance: incorrect, rejected"
    if status == "not_beyond_noise" and "too noisy to tell" in str(entry.get("reason") or ""):
        return (f"{who}: too noisy to tell whether the training loss still matches (the script's own runs end "
                "further apart than the tolerance): rejected, not incorrect")
    if status == "failed":
        return f"{who} made the script fail: rejected"
    if status == "skipped":
        return f"{who} was not tried: skipped"
    if status == "over_memory":
        return f"{who} peaked at {memory(entry['peak_memory_bytes'])}, over the memory limit: rejected"
    said = speed(entry["ratio"])
    outcome = "kept" if status == "kept" else "rejected"
    if said == "not measured":
        return f"{who}: {status.replace('_', ' ')}, {outcome}"
    if status == "not_repaid":
        return f"{who} was {said} per step here, but its fixed cost is not repaid over the run: {outcome}"
    if status == "not_beyond_noise" and "pairs disagreed" in str(entry.get("reason") or ""):
        return f"{who}: its alternating bursts disagreed (some pairs faster, some slower): not decided, not kept"
    if status == "not_beyond_noise":
        return f"{who} was {said} here, not beyond noise: {outcome}"
    if status == "unconfirmed":  # measured, never judged: not the same as rejected
        return f"{who} was {said} here, but the budget ran out before it was confirmed: not kept"
    covers = str(entry.get("reason") or "").partition("applied from outside: ")[2]
    if status == "kept" and covers:
        return f"{who} was {said} here: kept, as applied from outside: {covers}"
    if status == "kept" and entry.get("memory_lever"):
        return f"{who} brought peak memory under the limit ({memory(entry['peak_memory_bytes'])}), {said}: kept"
    if status == "screened_out":
        return f"{who} was {said} here, but another of its candidates was faster: {outcome}"
    return f"{who} was {said} here: {outcome}"


def _kept_not_written(entry: dict[str, Any], who: str, pick: str) -> str:
    """A change the search kept that did not reach torchboost.toml: the end-to-end check did
    not confirm the pick ("unchanged"), had no time to ("unverified"), or the tune failed."""
    said = speed(entry["ratio"])
    measured = f"{who} was {said} a step in the search" if said != "not measured" else f"{who} was kept by the search"
    if pick == "unverified":
        return f"{measured}: written apart, to torchboost.unverified.toml, until verified end to end"
    if pick == "failed":
        return f"{measured}, but the tune ended on an error: not written"
    return f"{measured}, but the pick did not hold end to end: not kept"


def spread(step: dict[str, Any]) -> str:
    """A waterfall entry's pair-ratio spread: "0.021 (0.731–0.752)", or "–" for the baseline."""
    if not step["ratios"]:
        return "–"
    return f"{step['spread']:.3f} ({min(step['ratios']):.3f}–{max(step['ratios']):.3f})"

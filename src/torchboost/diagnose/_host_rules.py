"""Rules over the step's host side: checkpoint writes and output taking a share of the step.

Both read the phase table's host parts (:data:`~torchboost.evidence.observed.HOST_PARTS`,
timed by the observer outside the loop's phases) and what
:class:`~torchboost.evidence.host_side.HostFacts` adds: when each ``torch.save`` ran, its
bytes, the output calls per step. Neither has a ``torchboost.toml`` key: the fix is the
script's own line, written as advice. Registered in :data:`torchboost.diagnose.rules.RULES`.
"""

from __future__ import annotations

import statistics

from torchboost.evidence.findings import Finding
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import less_often, r, view

__all__ = ["CHECKPOINT_LESS_OFTEN", "OUTPUT_LESS_OFTEN", "host_checkpoint", "host_output"]

CHECKPOINT_LESS_OFTEN = 4
"""The estimate's assumption: checkpoints written this many times less often."""
OUTPUT_LESS_OFTEN = 10
"""The estimate's assumption: printing and logging this many times less often."""


def host_checkpoint(facts: Facts, *, checkpoint_write_pct: float = 10.0) -> Finding | None:
    """``torch.save`` takes ``checkpoint_write_pct`` percent of the step or more, spread over
    the steps (a checkpoint every N steps): save less often, or in a background thread."""
    v = view(facts)
    part = v.ms.get("checkpoint", 0.0)
    if v.step_ms <= 0 or 100.0 * part / v.step_ms < checkpoint_write_pct:
        return None
    host = facts.host or HostFacts()
    every, written = host.checkpoint_every(), host.checkpoint_bytes_median()
    share = 100.0 * part / v.step_ms
    speedup, formula = less_often(v.step_ms, part, CHECKPOINT_LESS_OFTEN)
    cadence = f" every {every} steps" if every else ""
    later = every * CHECKPOINT_LESS_OFTEN if every else 100
    evidence = {"checkpoint_ms_per_step": r(part), "checkpoint_pct": r(share, 1), "step_ms": r(v.step_ms)}
    if host.checkpoint_ms:
        evidence["ms_per_write"] = r(statistics.median(host.checkpoint_ms))
    if every:
        evidence["every_steps"] = every
    if written:
        evidence["checkpoint_bytes"] = written
    return Finding(
        id="host.checkpoint",
        title=f"torch.save{cadence} takes {share:.0f}% of the step: save every {later} steps or in a background "
              "thread",
        evidence=evidence,
        advice=f"the checkpoint is the script's: save every {later} steps, or from a thread of its own",
        advice_code=(f"if step % {later} == 0:  # a checkpoint every {later} steps\n"
                     "    torch.save(model.state_dict(), path)\n"
                     "# or off the step: a copy the next steps do not change, written by a thread\n"
                     "import threading\n"
                     "state = {k: v.detach().to('cpu', copy=True) for k, v in model.state_dict().items()}\n"
                     "threading.Thread(target=torch.save, args=(state, path)).start()"),
        expected_speedup=speedup,
        formula=f"{formula}; P ms of torch.save per step, a checkpoint {CHECKPOINT_LESS_OFTEN}x less often "
                "(assumed)",
        notes=["A thread shares the cores and the GIL with training: copying the state is still on the step, "
               "and the write's share of it is what a thread takes off; time it again with the doctor.",
               "Counted: every torch.save (and safetensors' save_file) the training thread made outside the "
               "loop's phases; a save from a thread of its own is not the step's."],
    )


def host_output(facts: Facts, *, output_pct: float = 5.0) -> Finding | None:
    """Printing and logging (print, logging records, writes to stdout and stderr, a progress
    bar) take ``output_pct`` percent of the step or more: print every N steps."""
    v = view(facts)
    part = v.ms.get("output", 0.0)
    if v.step_ms <= 0 or 100.0 * part / v.step_ms < output_pct:
        return None
    host = facts.host or HostFacts()
    recorded = len(facts.steps)
    share = 100.0 * part / v.step_ms
    speedup, formula = less_often(v.step_ms, part, OUTPUT_LESS_OFTEN)
    evidence = {"output_ms_per_step": r(part), "output_pct": r(share, 1), "step_ms": r(v.step_ms)}
    if host.output_calls and recorded:
        evidence["output_calls_per_step"] = r(host.output_calls / recorded, 1)
    return Finding(
        id="host.output",
        title=f"Printing and logging take {share:.0f}% of the step: print every {OUTPUT_LESS_OFTEN} steps",
        evidence=evidence,
        advice=f"the printing is the script's: print or log every {OUTPUT_LESS_OFTEN} steps, not every step",
        advice_code=(f"if step % {OUTPUT_LESS_OFTEN} == 0:  # one line every {OUTPUT_LESS_OFTEN} steps\n"
                     "    print(f\"step {step} loss {loss.item():.4f}\")"),
        expected_speedup=speedup,
        formula=f"{formula}; P ms of printing and logging per step, done {OUTPUT_LESS_OFTEN}x less often "
                "(assumed)",
        notes=["Counted: print (its arguments' formatting included: print(tensor) formats the tensor), "
               "logging records, writes to sys.stdout and sys.stderr (a progress bar's), in the training "
               "thread outside the loop's phases."],
    )

"""The accelerator left unused: a CUDA GPU or Apple's MPS is here, and the model trains on the CPU.

The slowness users report most: a script that tests only ``torch.cuda.is_available()`` runs on
the CPU of a Mac, a model never moved with ``.to("cuda")``. No setting: where the model lives
is the script's own line, so the finding names the change in the script's words. No gain is
claimed: the accelerator's speed on this model is not measured here.
"""

from __future__ import annotations

from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, ModelFacts
from torchboost.techniques.registry import Rule, Technique

__all__ = ["TECHNIQUE", "accelerator_unused"]

ACCELERATORS = ("cuda", "mps")
"""Device types a model trains faster on than a CPU, as torch names them."""


def _device_line(device: str) -> str:
    if device == "mps":
        return ('device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() '
                'else "cpu"')
    return 'device = "cuda" if torch.cuda.is_available() else "cpu"'


def accelerator_unused(facts: Facts) -> Finding | None:
    """The environment has a CUDA GPU or MPS and the model's parameters are on the CPU."""
    here, model = str(facts.env.get("device", "cpu")), facts.model
    if here not in ACCELERATORS or model is None or str(model.device).split(":")[0] != "cpu":
        return None
    name = "a CUDA GPU" if here == "cuda" else "Apple's MPS"
    gpu = facts.env.get("gpu_name") or ""
    mac = " (a script that tests only torch.cuda.is_available() runs on the CPU of a Mac)" if here == "mps" else ""
    return Finding(
        id="accelerator.unused",
        title=f"{name} is here{f' ({gpu})' if gpu else ''} and the model trains on the CPU: move the model and "
              f"batches to '{here}'",
        evidence={"device_available": here, "model_device": str(model.device), "gpu_name": gpu,
                  "parameters": model.parameters},
        advice=f"move the model and batches to '{here}': model.to('{here}') before the optimizer is built, "
               f"and each batch with .to('{here}'){mac}",
        advice_code=(f"{_device_line(here)}\nmodel = model.to(device)  # before the optimizer is built\n"
                     "x, y = x.to(device), y.to(device)  # each batch, in the loop"),
        expected_speedup=1.0,
        formula="not estimated: the accelerator's speed on this model is not measured here",
        notes=[f"Every other finding of this run is for the CPU; run the doctor again once the model is on "
               f"'{here}'."],
    )


def _example() -> Facts:
    return Facts(env={"device": "mps"}, model=ModelFacts(class_name="Net", parameters=1000, device="cpu"))


TECHNIQUE = Technique(
    name="accelerator",
    title="the accelerator left unused (diagnosed only: where the model lives is the script's line)",
    after=("trackers",),
    placed="no setting: nothing is applied, the model's device is the script's",
    rules=(Rule("accelerator.unused", accelerator_unused, example=_example),),
)

"""Several processes under ``torchrun`` (DDP): the technique's descriptor.

Its parts: ``distributed_setup`` (the process group, the DDP wrap and the sharded loader
the Booster makes), ``distributed_facts`` (what the doctor reads of a DDP wrapper) and
``distributed_diagnosis`` (the findings for a step its all-reduce holds).
"""

from __future__ import annotations

from torchboost.techniques.distributed.distributed_diagnosis import (
    bucket_cap, example_bucket_cap, example_find_unused, example_no_sync, example_static_graph, find_unused, no_sync,
    static_graph,
)
from torchboost.techniques.distributed.distributed_facts import DdpFacts, probe_ddp
from torchboost.techniques.distributed.distributed_setup import (
    Distributed, DistributedWarning, SingleProcess, make_distributed, unwrap_model,
)
from torchboost.techniques.registry import Preparation, Rule, Technique

__all__ = ["DdpFacts", "DistributedWarning", "Distributed", "SingleProcess", "make_distributed", "unwrap_model"]


# No config section: torchrun's environment says whether there are several processes.

def _setup(prep: Preparation) -> None:
    # Before anything else: resolving and the later steps may communicate.
    prep.dist = make_distributed(prep.env, prep.device)


def _apply(prep: Preparation) -> None:
    # After compile: DDP wraps the compiled module and all-reduces its gradients. The
    # loader is sharded before it is rebuilt, so the rebuilt one keeps the DistributedSampler.
    prep.model = prep.dist.wrap_model(prep.model)
    if prep.loader is not None:
        prep.loader = prep.dist.shard_loader(prep.loader)


TECHNIQUE = Technique(
    name="distributed",
    title="several processes (torchrun + DDP)",
    after=('compile',),
    placed='DDP wraps the compiled model and gives the loader its DistributedSampler before the loader is rebuilt',
    setup=_setup,
    apply=_apply,
    nocode_refusal="torchrun starts the processes; the Booster wraps the model in DDP",
    facts=DdpFacts,
    probe=probe_ddp,
    rules=(Rule("distributed.no_sync", no_sync, example=example_no_sync),
           Rule("distributed.bucket_cap", bucket_cap, example=example_bucket_cap),
           Rule("distributed.find_unused", find_unused, example=example_find_unused),
           Rule("distributed.static_graph", static_graph, example=example_static_graph)),
)

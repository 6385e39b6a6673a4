"""Each built-in workload trains: plain and through the Booster, and its loss falls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchboost.workloads import NAMES, REGISTRY, RunResult, Workload, train

# Small batches keep each 100-step run to a second or two on a 2-core CPU.
_SMALL_BATCH = {"gpt": 8, "vision": 16, "mlp": 32, "data": 16}
_BUILD_KW = {"data": {"sample_cost_us": 20.0}}


def _build(name: str, **kw):
    return REGISTRY[name].build("tiny", batch_size=_SMALL_BATCH[name], seed=0, **{**_BUILD_KW.get(name, {}), **kw})


def assert_loss_falls(result: RunResult, factor: float = 0.9) -> None:
    """The mean loss of the last steps is below ``factor`` x that of the first steps."""
    assert torch.isfinite(torch.tensor([result.first_loss, result.final_loss])).all(), result
    assert result.final_loss < factor * result.first_loss, result


@pytest.fixture(autouse=True)
def _one_thread():
    # One intra-op thread: these tiny models gain nothing from two, and on a shared,
    # busy machine spinning thread pools make runs many times slower. The Booster may
    # also set threads process-wide; later tests get the original setting back.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", NAMES)
def test_plain_loss_falls_over_100_steps(name):
    result = train(_build(name), steps=100, seed=0, log=None)
    assert result.workload == name and result.steps == 100 and not result.booster
    assert result.samples_per_s > 0
    assert_loss_falls(result)


def test_loss_check_detects_a_model_that_does_not_learn():
    # The broken twin: lr=0 leaves the weights where they started, so the loss cannot fall.
    workload = _build("mlp")
    workload.make_optimizer = lambda params, **kw: torch.optim.SGD(params, lr=0.0)
    result = train(workload, steps=100, seed=0, log=None)
    with pytest.raises(AssertionError):
        assert_loss_falls(result)


@pytest.mark.parametrize("name", NAMES)
def test_booster_loss_falls_over_100_steps(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no torchboost.toml here: the auto defaults
    result = train(_build(name), steps=100, seed=0, booster=True, log=None)
    assert result.booster
    assert_loss_falls(result)


def _reference_losses(workload, steps: int, seed: int) -> list[float]:
    """The same training written in plain PyTorch, without the shared loop."""
    torch.manual_seed(seed)
    loader = torch.utils.data.DataLoader(
        workload.dataset,
        batch_size=workload.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
    )
    optimizer = workload.make_optimizer(workload.model.parameters())
    losses = []
    batches = iter(loader)
    for _ in range(steps):
        x, y = next(batches)
        loss = workload.loss_fn(workload.model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _check_matches_reference(workload_for_loop, workload_for_reference, steps: int = 8) -> None:
    result = train(workload_for_loop, steps=steps, seed=3, warmup_steps=0, log=None)
    ref = _reference_losses(workload_for_reference, steps, seed=3)
    window = result.loss_window
    assert result.first_loss == pytest.approx(sum(ref[:window]) / window, rel=1e-6, abs=0)
    assert result.final_loss == pytest.approx(sum(ref[-window:]) / window, rel=1e-6, abs=0)


def test_shared_loop_equals_a_plain_pytorch_loop():
    _check_matches_reference(_build("mlp"), _build("mlp"))


def test_reference_check_detects_a_different_learning_rate():
    broken = _build("mlp")
    broken.make_optimizer = lambda params, **kw: torch.optim.Adam(params, lr=1e-2)
    with pytest.raises(AssertionError):
        _check_matches_reference(_build("mlp"), broken)


class _StaticOutput(torch.autograd.Function):
    """The loss written into one buffer at every call, as a CUDA graph's replay writes its
    static output (compile's reduce-overhead): each call returns a view of the same storage."""

    @staticmethod
    def forward(ctx, loss, buffer):
        buffer.copy_(loss)
        return buffer.view_as(buffer)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _static_loss_workload(seen: list[float]) -> Workload:
    """A tiny regression whose loss comes out of one buffer; ``seen`` gets each step's own loss."""
    buffer = torch.zeros(())

    def loss_fn(out, y):
        loss = torch.nn.functional.mse_loss(out, y)
        seen.append(float(loss.detach()))
        return _StaticOutput.apply(loss, buffer)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    return Workload("static", torch.nn.Linear(4, 1), data, loss_fn,
                    lambda params, **kw: torch.optim.SGD(params, lr=0.1), batch_size=8)


def test_the_loop_keeps_each_step_s_loss_when_the_next_step_overwrites_its_tensor():
    seen: list[float] = []
    result = train(_static_loss_workload(seen), steps=8, warmup_steps=0, log=None)
    window = result.loss_window
    assert len(seen) == 8 and seen[0] != seen[-1]
    assert result.first_loss == pytest.approx(sum(seen[:window]) / window, rel=1e-6, abs=0)
    assert result.final_loss == pytest.approx(sum(seen[-window:]) / window, rel=1e-6, abs=0)


def test_the_twin_an_alias_of_the_static_loss_reads_the_next_step_s():
    seen: list[float] = []
    workload = _static_loss_workload(seen)
    out = workload.model(torch.randn(8, 4))
    kept = workload.loss_fn(out, torch.zeros(8, 1)).detach()
    workload.loss_fn(out, torch.full((8, 1), 5.0))
    assert float(kept) == seen[1] != seen[0]


def test_booster_with_everything_off_is_the_plain_loop(tmp_path, monkeypatch):
    from torchboost import BoostConfig

    monkeypatch.chdir(tmp_path)
    plain = train(_build("mlp"), steps=20, seed=1, log=None)
    off = train(_build("mlp"), steps=20, seed=1, booster=True, config=BoostConfig.off(), log=None)
    assert (off.first_loss, off.final_loss) == (plain.first_loss, plain.final_loss)


def _run_script(name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", f"torchboost.workloads.{name}", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow
def test_script_prints_log_lines_and_a_final_json_line(tmp_path):
    proc = _run_script("mlp", ["--steps", "20", "--log-every", "10", "--batch-size", "16"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("mlp: step 10/20 loss ")
    final = json.loads(lines[-1])
    assert final["workload"] == "mlp" and final["steps"] == 20 and final["batch_size"] == 16
    assert {"samples_per_s", "first_loss", "final_loss"} <= set(final)


@pytest.mark.slow
def test_booster_script_reads_torchboost_toml_from_the_cwd(tmp_path):
    # An invalid file must be rejected by name: proof that --booster read it.
    (tmp_path / "torchboost.toml").write_text('[precision]\nmode = "fp12"\n')
    proc = _run_script("mlp", ["--steps", "5", "--booster"], tmp_path)
    assert proc.returncode != 0
    assert "precision.mode" in proc.stderr
    (tmp_path / "torchboost.toml").write_text('[precision]\nmode = "fp32"\n[loader]\nnum_workers = 0\n')
    proc = _run_script("mlp", ["--steps", "5", "--booster"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["booster"] is True

"""Gradient accumulation and micro-batching against full-batch gradients from plain PyTorch.

Every gradient check compares the gradient the optimizer is about to use (captured by a
step pre-hook) with a reference computed by plain PyTorch, without torchboost, on the same
weights and the window's samples as one batch. Each has a broken twin: the same check must
catch a plain-PyTorch accumulation done the usual wrong way (divide by K, mean of means).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchboost
from torchboost import BoostConfig, ConfigError
from torchboost.checkpoint import CheckpointError
from torchboost.techniques.accumulation import AccumulationConfig
from torchboost.techniques.accumulation import (
    MicroBatchWarning,
    batch_size_of,
    is_oom,
    resolve_accumulation,
    split_batch,
)

N = 48
VOCAB, PAD = 11, 0


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(3)
    return TensorDataset(torch.randn(N, 8, generator=g), torch.randint(0, 3, (N,), generator=g))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))


def _config(steps: int = 1, **accumulation) -> BoostConfig:
    return BoostConfig.off().replace(accumulation={"steps": steps, **accumulation})


def _check(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]], rel: float = 1e-6) -> None:
    """Every step's gradients equal within ``rel`` of the largest reference entry."""
    assert len(got) == len(want), f"{len(got)} steps, expected {len(want)}"
    for step, (g_step, w_step) in enumerate(zip(got, want)):
        for g, w in zip(g_step, w_step):
            err = (g - w).abs().max().item() / max(w.abs().max().item(), 1e-12)
            assert err <= rel, f"step {step}: relative gradient error {err:.2e} > {rel:.0e}"


def _window_grads(model: nn.Module, xs: list[torch.Tensor], ys: list[torch.Tensor], kind: str) -> list[torch.Tensor]:
    """Plain PyTorch, on a copy of ``model``: the reference ("full") or a broken accumulation."""
    ref = copy.deepcopy(model)
    ref.zero_grad(set_to_none=True)
    loss_fn = nn.CrossEntropyLoss()
    if kind == "full":
        loss_fn(ref(torch.cat(xs)), torch.cat(ys)).backward()
    elif kind == "divide_by_k":  # the classic bug: every micro-batch weighs the same
        for x, y in zip(xs, ys):
            (loss_fn(ref(x), y) / len(xs)).backward()
    elif kind == "no_division":
        for x, y in zip(xs, ys):
            loss_fn(ref(x), y).backward()
    return [p.grad.clone() for p in ref.parameters()]


def _run_loop(loader_kwargs: dict, steps: int, epochs: int = 1, kinds=("full",), lr: float = 0.1):
    """The Booster loop of the issue; at every real step, the gradient and the references."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(_data(), **loader_kwargs)
    booster = torchboost.Booster(_config(steps), device="cpu", verbose=False)
    model, optimizer, loader = booster.prepare(model, optimizer, loader)
    got, refs, window = [], {k: [] for k in kinds}, []

    def before_step(opt, args, kwargs):
        got.append([p.grad.clone() for p in model.parameters()])
        for kind in kinds:
            refs[kind].append(_window_grads(model, [b[0] for b in window], [b[1] for b in window], kind))
        window.clear()

    optimizer.optimizer.register_step_pre_hook(before_step)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for x, y in loader:
            window.append((x, y))
            with booster.accumulate(model):
                loss = loss_fn(model(x), y)
                booster.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    return got, refs, optimizer


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_uniform_windows_equal_the_full_batch_gradient(steps):
    got, refs, optimizer = _run_loop({"batch_size": 4}, steps, kinds=("full", "no_division"))
    _check(got, refs["full"])
    assert optimizer.real_steps == N // 4 // steps
    if steps > 1:  # broken twin: forgetting to normalise is caught
        with pytest.raises(AssertionError, match="relative gradient error"):
            _check(refs["no_division"], refs["full"])


@pytest.mark.parametrize("splits", [[4, 4, 4], [4, 4, 2], [8, 1]])
def test_uneven_micro_batches_weigh_by_samples(splits):
    starts = [sum(splits[:i]) for i in range(len(splits))]
    batches = [list(range(s, s + n)) for s, n in zip(starts, splits)]
    got, refs, optimizer = _run_loop({"batch_sampler": batches}, len(splits), kinds=("full", "divide_by_k"))
    _check(got, refs["full"])
    assert optimizer.real_steps == 1
    if len(set(splits)) > 1:  # broken twin: divide-by-K (mean of means) is caught
        with pytest.raises(AssertionError, match="relative gradient error"):
            _check(refs["divide_by_k"], refs["full"])


def test_shorter_last_window_steps_with_its_own_normalisation():
    # 48 samples in batches of 5: 9 full batches and one of 3; K = 4 gives windows of
    # 4, 4 and 2 batches (the last of 13 samples), in each of two epochs.
    got, refs, optimizer = _run_loop({"batch_size": 5, "shuffle": True,
                                      "generator": torch.Generator().manual_seed(5)},
                                     4, epochs=2, kinds=("full", "divide_by_k"))
    assert optimizer.real_steps == 6
    _check(got, refs["full"])
    with pytest.raises(AssertionError, match="relative gradient error"):
        _check(refs["divide_by_k"], refs["full"])


# -- a padded token loss with num_items -------------------------------------------------------


class _TokenModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.out = nn.Linear(8, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(tokens)))


def _token_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Four micro-batches of padded sequences with very different token counts."""
    g = torch.Generator().manual_seed(7)
    out = []
    for rows, length, keep in [(3, 6, 6), (3, 6, 2), (2, 9, 9), (4, 5, 1)]:
        tokens = torch.randint(1, VOCAB, (rows, length), generator=g)
        tokens[:, keep:] = PAD
        targets = torch.roll(tokens, -1, dims=1)
        targets[:, -1] = PAD
        out.append((tokens, targets))
    return out


def _token_loss_sum(model, tokens, targets):
    logits = model(tokens)
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD, reduction="sum")


def _token_reference(model: nn.Module, batches, kind: str) -> list[torch.Tensor]:
    ref = copy.deepcopy(model)
    ref.zero_grad(set_to_none=True)
    if kind == "full":  # sum over every token of the window / the window's token count
        total = sum(int((t != PAD).sum()) for _, t in batches)
        (sum(_token_loss_sum(ref, x, t) for x, t in batches) / total).backward()
    else:  # broken: the mean of the per-micro-batch token means
        for x, t in batches:
            (_token_loss_sum(ref, x, t) / int((t != PAD).sum()) / len(batches)).backward()
    return [p.grad.clone() for p in ref.parameters()]


def test_num_items_gives_sum_over_window_divided_by_total_items():
    torch.manual_seed(0)
    model = _TokenModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = _token_batches()
    want = [_token_reference(model, batches, "full")]
    broken = [_token_reference(model, batches, "mean_of_means")]
    booster = torchboost.Booster(_config(len(batches)), device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, optimizer)
    got = []
    optimizer.optimizer.register_step_pre_hook(
        lambda *a: got.append([p.grad.clone() for p in model.parameters()])
    )
    for tokens, targets in batches:
        with booster.accumulate(model):
            loss_sum = _token_loss_sum(model, tokens, targets)
            booster.backward(loss_sum, num_items=int((targets != PAD).sum()))
            optimizer.step()
            optimizer.zero_grad()
    _check(got, want)
    with pytest.raises(AssertionError, match="relative gradient error"):
        _check(broken, want)


def test_num_items_with_one_step_per_window_divides_too():
    torch.manual_seed(0)
    model = _TokenModel()
    tokens, targets = _token_batches()[1]
    want = _token_reference(model, [(tokens, targets)], "full")
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    booster.backward(_token_loss_sum(model, tokens, targets), num_items=int((targets != PAD).sum()))
    _check([[p.grad for p in model.parameters()]], [want])


# -- what the loop may and may not do ------------------------------------------------------------


def test_step_and_zero_grad_act_only_at_the_window_end():
    model = _model()
    booster = torchboost.Booster(_config(3), device="cpu", verbose=False)
    model, optimizer, loader = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                               DataLoader(_data(), batch_size=4))
    before = [p.detach().clone() for p in model.parameters()]
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(loader):
        with booster.accumulate(model):
            booster.backward(loss_fn(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            if i == 0:
                assert all(p.grad is not None for p in model.parameters())  # kept mid-window
                assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
                with pytest.raises(CheckpointError, match="window is open"):
                    booster.save("unused.pt", model=model)
        if i == 2:
            assert all(p.grad is None for p in model.parameters())
            break
    assert optimizer.real_steps == 1


def test_accumulating_without_the_context_says_what_to_do():
    model = _model()
    booster = torchboost.Booster(_config(2), device="cpu", verbose=False)
    model, _ = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match="booster.accumulate"):
        booster.backward(model(torch.randn(2, 8)).sum())


def test_micro_batch_without_known_sample_count_says_what_to_do():
    model = _model()
    booster = torchboost.Booster(_config(2), device="cpu", verbose=False)
    model, _ = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="num_samples"):
        with booster.accumulate(model):
            booster.backward(model(torch.randn(2, 8)).sum())


# -- scheduler ------------------------------------------------------------------------------------


def test_scheduler_steps_once_per_real_optimizer_step_with_an_fp16_skip():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    raw_scheduler_calls = 0
    config = _config(3).replace(precision={"mode": "fp16"})
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model, optimizer, loader, scheduler = booster.prepare(
        model, optimizer, DataLoader(_data(), batch_size=4), scheduler
    )
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(loader):  # 12 micro-steps, 4 windows
        with booster.accumulate(model):
            with booster.autocast():
                loss = loss_fn(model(x), y)
            if i == 4:  # overflow inside the second window: that whole step is skipped
                loss = loss * float("inf")
            booster.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()  # called every micro-step, as users do
            raw_scheduler_calls += 1
    assert (optimizer.real_steps, optimizer.skipped_steps) == (3, 1)
    assert scheduler.last_epoch == optimizer.real_steps
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.9**3)
    # Broken twin: a scheduler stepped per micro-step would be far ahead.
    assert raw_scheduler_calls != optimizer.real_steps


# -- train_step: micro-batching and out-of-memory ------------------------------------------------


def _train_step_grads(micro, oom_from=None, zero_grad_on_retry=True):
    model = _model()
    booster = torchboost.Booster(_config(1, micro_batch_size=micro), device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    booster.micro_batcher.simulate_oom_from = oom_from
    if not zero_grad_on_retry:  # broken twin: partial gradients survive the retry
        optimizer.__dict__["_zero_grad_fn"] = lambda opt, set_to_none: None
    grads = []
    optimizer.optimizer.register_step_pre_hook(
        lambda *a: grads.append([p.grad.clone() for p in model.parameters()])
    )
    x, y = _data().tensors
    batch = (x[:32], y[:32])
    loss_fn = nn.CrossEntropyLoss()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = booster.train_step(batch, lambda b: loss_fn(model(b[0]), b[1]))
    said = [w for w in caught if issubclass(w.category, MicroBatchWarning)]
    return grads, optimizer, booster, said, loss


def test_oom_at_8_completes_the_step_at_4_with_the_same_gradient():
    clean, clean_opt, _, none_said, _ = _train_step_grads(4)
    grads, optimizer, booster, said, _ = _train_step_grads(8, oom_from=8)
    assert none_said == [] and len(said) == 1 and "4 samples" in str(said[0].message)
    assert booster.micro_batcher.size == 4
    assert optimizer.real_steps == clean_opt.real_steps == 1 and len(grads) == 1
    _check(grads, clean, rel=0.0)  # bitwise: the retry starts from cleared gradients
    broken, *_ = _train_step_grads(8, oom_from=8, zero_grad_on_retry=False)
    with pytest.raises(AssertionError, match="relative gradient error"):
        _check(broken, clean, rel=1e-6)


def test_auto_starts_with_the_whole_batch_and_halves_until_it_fits():
    grads, optimizer, booster, said, loss = _train_step_grads("auto", oom_from=8)
    assert booster.micro_batcher.size == 4 and booster.micro_batcher.halvings == 3 and len(said) == 3
    model = _model()
    x, y = _data().tensors
    want = _window_grads(model, [x[:32]], [y[:32]], "full")
    _check(grads, [want])
    full_loss = nn.CrossEntropyLoss()(model(x[:32]), y[:32])
    assert loss.item() == pytest.approx(full_loss.item(), rel=1e-6)


def test_train_step_keeps_the_smaller_size_and_says_so_once():
    model = _model()
    booster = torchboost.Booster(_config(1, micro_batch_size=16), device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    booster.micro_batcher.simulate_oom_from = 16
    x, y = _data().tensors
    loss_fn = nn.CrossEntropyLoss()
    with pytest.warns(MicroBatchWarning):
        booster.train_step((x[:32], y[:32]), lambda b: loss_fn(model(b[0]), b[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MicroBatchWarning)
        booster.train_step((x[16:48], y[16:48]), lambda b: loss_fn(model(b[0]), b[1]))
    assert optimizer.real_steps == 2 and booster.micro_batcher.size == 8


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


def _static_sum_loss(model: nn.Module, sums: list[float]):
    """``compute_loss`` returning ``(loss_sum, items)`` out of one buffer; ``sums`` gets each call's own."""
    buffer, loss_fn = torch.zeros(()), nn.CrossEntropyLoss(reduction="sum")

    def compute(batch):
        loss = loss_fn(model(batch[0]), batch[1])
        sums.append(float(loss.detach()))
        return _StaticOutput.apply(loss, buffer), batch[0].shape[0]

    return compute


def test_train_step_s_loss_keeps_each_micro_batch_s_own_sum_when_the_next_overwrites_it():
    model = _model()
    booster = torchboost.Booster(_config(1, micro_batch_size=8), device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = _data().tensors
    sums: list[float] = []
    loss = booster.train_step((x[:32], y[:32]), _static_sum_loss(model, sums))
    assert len(sums) == 4 and len(set(sums)) == 4
    assert float(loss) == pytest.approx(sum(sums) / 32, rel=1e-6)


def test_the_twin_an_alias_of_the_static_sum_reads_the_next_micro_batch_s():
    sums: list[float] = []
    compute = _static_sum_loss(_model(), sums)
    x, y = _data().tensors
    kept = compute((x[:8], y[:8]))[0].detach()
    compute((x[8:16], y[8:16]))
    assert float(kept) == sums[1] != sums[0]


def test_a_non_oom_error_is_not_retried():
    model = _model()
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))

    def bad(batch):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        booster.train_step((torch.randn(8, 8),), bad)
    assert booster.micro_batcher.halvings == 0 and optimizer.real_steps == 0


def test_is_oom_is_the_one_rule():
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_oom(ValueError("out of memory"))  # only runtime errors come from allocators


def test_split_batch_slices_every_batch_tensor():
    batch = {"x": torch.arange(10).view(5, 2), "y": torch.arange(5), "scale": torch.tensor(2.0)}
    parts = list(split_batch(batch, 2))
    assert [n for _, n in parts] == [2, 2, 1]
    assert torch.equal(torch.cat([p["x"] for p, _ in parts]), batch["x"])
    assert all(p["scale"] is batch["scale"] for p, _ in parts)
    assert batch_size_of(batch) == 5 and batch_size_of({"s": "text"}) is None


# -- configuration ---------------------------------------------------------------------------------


def test_effective_batch_size_gives_the_steps():
    r = resolve_accumulation(AccumulationConfig(effective_batch_size=64), batch_size=8, world_size=2)
    assert r.steps == 4 and r.effective_batch_size == 64
    r = resolve_accumulation(AccumulationConfig(steps=3), batch_size=8)
    assert r.effective_batch_size == 24 and r.micro_batch_size == "batch"


def test_effective_batch_size_that_does_not_divide_says_what_to_use():
    with pytest.raises(ConfigError, match=r"effective_batch_size = 100 does not divide by .* 32.*96 or 128"):
        resolve_accumulation(AccumulationConfig(effective_batch_size=100), batch_size=16, world_size=2)
    with pytest.raises(ConfigError, match="set only one"):
        resolve_accumulation(AccumulationConfig(steps=2, effective_batch_size=64), batch_size=8)
    with pytest.raises(ConfigError, match="needs a DataLoader"):
        resolve_accumulation(AccumulationConfig(effective_batch_size=64), batch_size=None)


def test_prepare_resolves_effective_batch_size_from_the_loader():
    model = _model()
    booster = torchboost.Booster(_config(1, effective_batch_size=12), device="cpu", verbose=False)
    booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(_data(), batch_size=4))
    assert booster.resolved.config.accumulation.steps == 3
    assert "accumulation.steps" in booster.summary()

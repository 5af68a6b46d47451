"""The training recipe for sparse ReLU feed-forward layers as library pieces: the L1 coefficient's
warm-up schedule, per-layer activity and dead-neuron tracking from what the library's training
ops return anyway, and re-initialisation of dead neurons. The ReLU gates and the L1 term itself
are the modules' (TwELLGatedMLP, swap_mlps; a SiLU model converts with convert_to_relu=True).

    model = transformers.LlamaForCausalLM(config)             # hidden_act="relu"
    twellrt.swap_mlps(model)
    schedule = twellrt.L1Schedule(2e-5, start_step=0, end_step=1000)
    tracker = twellrt.ActivityTracker(model)
    for step, batch in enumerate(data):
        schedule.apply(model, step)                           # every layer's l1_coef for this step
        model(**batch).loss.backward()                        # the L1 term's gradient is the op's
        opt.step(); opt.zero_grad()
        if step % 500 == 499:
            print(tracker.l0(), tracker.dead_counts())
            twellrt.reinit_dead_neurons(tracker, optimizer=opt)   # and a new window begins

What the tracker reads. The library's training forward returns two aggregates, L0 (active
neurons per token) and L1 (module.last_stats); it exposes no per-neuron counts. Per neuron, its
backward writes weight gradients only on the support: gate_proj.weight's gradient row n is
Σ_m dP[m, n]·x[m], where dP is zero wherever neuron n is off. So that row is non-zero exactly
when neuron n fired on at least one token of the step, and the tracker reads this bit from the
gradient as autograd delivers it (a tensor hook, before accumulation: one comparison and row
reduction of a tensor the backward has just written; no forward is repeated and no activation
is kept). With l1_coef > 0 every firing neuron's row is non-zero (dT carries λ/M·sign(U)), so
the count is exact. With l1_coef = 0 (a warm-up before its start step) a firing on a token whose
output gradient is zero leaves no trace: the last position of a causal LM's sequence (it has no
label and nothing attends to it) and tokens whose label is ignored, so a neuron that fired only
there reads as idle for that step, as it also learns nothing from it. An fp16 gradient small
enough to flush to zero does the same (bf16 has fp32's range). Create the tracker after moving
the model to its device; parameters sharded by FSDP are not supported."""

from __future__ import annotations

import math
from typing import Dict, Optional

import torch
from torch import nn

from ._lib import invalid
from .modules import DownProj, TwELLGatedMLP

__all__ = ["L1Schedule", "ActivityTracker", "reinit_neurons", "reinit_dead_neurons", "twell_layers"]


def twell_layers(model: nn.Module) -> Dict[str, TwELLGatedMLP]:
    """The TwELLGatedMLP modules of `model` by qualified name (the model itself under "")."""
    return {name: m for name, m in model.named_modules() if isinstance(m, TwELLGatedMLP)}


def _step_arg(what: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise invalid(f"twellrt.L1Schedule: {what} must be an int >= 0, got {v!r}")
    return v


class L1Schedule:
    """The L1 coefficient per optimizer step: 0 before start_step, rising linearly to `target`
    at end_step, `target` from then on (the SparseLM keys sparsity_start_warmup_step and
    sparsity_end_warmup_step):

        coef(step) = target · clamp((step − start_step) / (end_step − start_step), 0, 1)

    end_step == start_step (both 0 by default) switches the term on at start_step with no ramp.
    The coefficient is the modules' l1_coef, which multiplies the library's L1 = Σ|h| / tokens
    (summed over neurons, averaged over tokens); a coefficient defined on the mean over neurons
    too is that divided by N."""

    def __init__(self, target: float, start_step: int = 0, end_step: int = 0):
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0.0 <= target < math.inf:
            raise invalid(f"twellrt.L1Schedule: target must be a finite float >= 0, got {target!r}")
        self.target = float(target)
        self.start_step = _step_arg("start_step", start_step)
        self.end_step = _step_arg("end_step", end_step)
        if self.end_step < self.start_step:
            raise invalid(f"twellrt.L1Schedule: end_step ({end_step}) is before start_step ({start_step})")

    @classmethod
    def from_config(cls, config, target: Optional[float] = None) -> "L1Schedule":
        """From a SparseLM config's sparsity_l1_coeff, sparsity_start_warmup_step and
        sparsity_end_warmup_step (a config object or dict; absent warm-up keys mean none).
        `target` overrides sparsity_l1_coeff, which must otherwise be present."""
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        if target is None:
            target = get("sparsity_l1_coeff")
            if target is None:
                raise invalid("twellrt.L1Schedule.from_config: the config has no sparsity_l1_coeff (pass target=)")
        start = get("sparsity_start_warmup_step") or 0
        end = get("sparsity_end_warmup_step")
        return cls(float(target), int(start), int(start if end is None else end))

    def __call__(self, step: int) -> float:
        step = _step_arg("step", step)
        if step < self.start_step:
            return 0.0
        if step >= self.end_step:
            return self.target
        return self.target * (step - self.start_step) / (self.end_step - self.start_step)

    def apply(self, model: nn.Module, step: int) -> float:
        """Sets l1_coef = coef(step) on every TwELLGatedMLP of `model` (call it before the step's
        forward: the backward applies the coefficient its forward was given) and returns it.
        Under torch.compile each distinct value is a new constant (a recompile) unless floats are
        traced dynamically; updating every k steps bounds that."""
        coef = self(step)
        for m in twell_layers(model).values():
            m.l1_coef = coef
        return coef

    def __repr__(self) -> str:
        return f"L1Schedule(target={self.target}, start_step={self.start_step}, end_step={self.end_step})"


class _Layer:
    """One tracked layer's window: device tensors, updated without host synchronisation."""

    def __init__(self, mlp: TwELLGatedMLP):
        w = mlp.gate_proj.weight
        self.mlp = mlp
        self.active_steps = torch.zeros(w.shape[0], dtype=torch.int64, device=w.device)
        self.steps = 0  # backward calls seen (host counter: the hook runs on the host)
        self.forwards = 0
        self.l0_sum = torch.zeros((), dtype=torch.float64, device=w.device)
        self.l1_sum = torch.zeros((), dtype=torch.float64, device=w.device)

    def reset(self) -> None:
        self.active_steps.zero_()
        self.steps = self.forwards = 0
        self.l0_sum.zero_()
        self.l1_sum.zero_()


def _neuron_param(mlp: nn.Module):
    """The first trainable weight with one row per neuron, whose gradient row is zero for a
    neuron that did not fire: gate_proj's, else up_proj's, else down_proj's weight_t."""
    for p in (mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight_t):
        if p.requires_grad:
            return p
    return None


class ActivityTracker:
    """Per-layer activity and dead neurons of the TwELLGatedMLP layers of `model` over a window
    of training steps (see the module docstring for what is read and why it needs no extra
    pass). Everything accumulates on the layers' devices; only the readers below synchronise.

    A step, per layer, is one backward through it (gradient accumulation: one per micro-batch).
    Training forwards feed the L0 / L1 means; inference forwards and forwards without a backward
    count nothing towards the per-neuron figures. `layers` maps qualified names to modules.
    Hooks stay until remove() (or the end of a `with` block)."""

    def __init__(self, model: nn.Module):
        layers = twell_layers(model)
        if not layers:
            raise invalid("twellrt.ActivityTracker: the model has no TwELLGatedMLP (call twellrt.swap_mlps first)")
        self.layers = layers
        self._state: Dict[str, _Layer] = {}
        self._hooks = []
        for name, mlp in layers.items():
            p = _neuron_param(mlp)
            if p is None:
                raise invalid(f"twellrt.ActivityTracker: {name or 'the model'} has no trainable weight to read activity from")
            st = _Layer(mlp)
            self._state[name] = st
            self._hooks.append(mlp.register_forward_hook(self._forward_hook(st), with_kwargs=True))
            self._hooks.append(p.register_hook(self._grad_hook(st)))

    @staticmethod
    def _forward_hook(st: _Layer):
        def hook(mlp, args, kwargs, out):
            x = args[0] if args else kwargs.get("x")
            stats = mlp.last_stats
            # last_stats is the last *training* forward's: an inference call leaves it as it was
            if stats is None or not isinstance(x, torch.Tensor) or not mlp._training(x):
                return
            st.forwards += 1
            st.l0_sum += stats[0]
            st.l1_sum += stats[1]

        return hook

    @staticmethod
    def _grad_hook(st: _Layer):
        def hook(grad):
            with torch.no_grad():
                st.active_steps += (grad != 0).any(dim=1)
            st.steps += 1

        return hook

    # ---- readers (these synchronise) --------------------------------------------------------

    def steps(self) -> Dict[str, int]:
        """Backward calls seen per layer in this window."""
        return {n: st.steps for n, st in self._state.items()}

    def active_steps(self) -> Dict[str, torch.Tensor]:
        """Per layer, int64 [N]: in how many of the window's steps each neuron fired."""
        return {n: st.active_steps.clone() for n, st in self._state.items()}

    def firing_rate(self) -> Dict[str, torch.Tensor]:
        """Per layer, float32 [N]: the fraction of the window's steps in which each neuron fired
        (NaN before the first step)."""
        return {n: st.active_steps.float() / st.steps if st.steps else torch.full_like(st.active_steps, float("nan"), dtype=torch.float32)
                for n, st in self._state.items()}

    def dead(self) -> Dict[str, torch.Tensor]:
        """Per layer, bool [N]: the neurons that fired in none of the window's steps (all False
        for a layer that has seen no step yet)."""
        return {n: (st.active_steps == 0) & (st.steps > 0) for n, st in self._state.items()}

    def dead_counts(self) -> Dict[str, int]:
        """Per layer, how many neurons are dead in this window."""
        return {n: int(d.sum()) for n, d in self.dead().items()}

    def dead_fraction(self) -> float:
        """Dead neurons over all tracked neurons (layers that have seen a step)."""
        seen = [n for n, st in self._state.items() if st.steps]
        if not seen:
            return 0.0
        dead = self.dead()
        return sum(int(dead[n].sum()) for n in seen) / sum(dead[n].numel() for n in seen)

    def l0(self) -> Dict[str, float]:
        """Per layer, the mean over the window's training forwards of L0 (active neurons per
        token); NaN before the first."""
        return {n: (st.l0_sum / st.forwards).item() if st.forwards else float("nan") for n, st in self._state.items()}

    def l1(self) -> Dict[str, float]:
        """Per layer, the mean of L1 (Σ|h| / tokens) over the window's training forwards."""
        return {n: (st.l1_sum / st.forwards).item() if st.forwards else float("nan") for n, st in self._state.items()}

    def mean_l0(self) -> float:
        """L0 averaged over the tracked layers (NaN before the first training forward)."""
        v = [x for x in self.l0().values() if not math.isnan(x)]
        return sum(v) / len(v) if v else float("nan")

    # ---- window and hooks --------------------------------------------------------------------

    def reset(self) -> None:
        """Starts a new window (every count and mean back to zero)."""
        for st in self._state.values():
            st.reset()

    def remove(self) -> None:
        """Removes the hooks; the readers keep the last window's values."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __enter__(self) -> "ActivityTracker":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


# ---------------------------------------------------------------------------------------------
# re-initialisation
# ---------------------------------------------------------------------------------------------


def _neuron_rows(mlp: nn.Module):
    """(parameter, [N, ·] view of it with one row per neuron) for gate, up and down."""
    d = mlp.down_proj
    if isinstance(d, DownProj):
        down = (d.weight_t, d.weight_t)
    elif isinstance(d, nn.Linear):
        down = (d.weight, d.weight.t())  # [K, N]: neuron n is column n
    else:
        raise invalid(f"twellrt.reinit_neurons: down_proj must be a DownProj or an nn.Linear, got {type(d).__name__}")
    return [(mlp.gate_proj.weight, mlp.gate_proj.weight), (mlp.up_proj.weight, mlp.up_proj.weight), down]


def _live_draw(rows: torch.Tensor, idx: torch.Tensor, live: torch.Tensor, generator) -> torch.Tensor:
    """len(idx) new rows, entry k ~ N(mean, std²) of column k over the live rows (fp32)."""
    n, width = len(idx), rows.shape[1]
    if live.sum() >= 2:
        lv = rows[live].float()
        mean, std = lv.mean(dim=0), lv.std(dim=0, unbiased=False)
        z = torch.randn(n, width, generator=generator, device="cpu", dtype=torch.float32).to(rows.device)
        return mean + std * z
    # nothing to take statistics from: nn.Linear's default init (fan-in = width)
    b = 1.0 / math.sqrt(width)
    return (torch.rand(n, width, generator=generator, device="cpu", dtype=torch.float32) * (2 * b) - b).to(rows.device)


def _reset_optimizer_rows(optimizer, param: torch.Tensor, rows_of, idx: torch.Tensor, live: torch.Tensor) -> None:
    state = optimizer.state.get(param) if optimizer is not None else None
    if not state:
        return
    for key, t in state.items():
        if not isinstance(t, torch.Tensor) or t.shape != param.shape:
            continue  # scalars (Adam's step) and anything not laid out like the parameter
        r = rows_of(t)
        if key in ("exp_avg_sq", "max_exp_avg_sq") and live.any():
            # the live rows' mean second moment: the first updates of the new weights are as large
            # as the live neurons' (a zero would make them about 3× the learning rate)
            r[idx] = r[live].mean(dim=0, keepdim=True).expand(len(idx), -1).to(t.dtype)
        else:
            r[idx] = 0


@torch.no_grad()
def reinit_neurons(mlp: nn.Module, neurons, *, optimizer=None, generator: Optional[torch.Generator] = None) -> int:
    """Re-initialises the given neurons of a gated MLP (a TwELLGatedMLP, or any module with
    gate_proj, up_proj nn.Linear and a DownProj or nn.Linear down_proj), in place; returns how
    many. `neurons`: a bool mask [N] or indices. Parameters stay the same objects, with their
    shapes, dtypes and devices; nothing of the other neurons changes.

    The init: each new gate_proj and up_proj row is drawn entry by entry from a normal with the
    mean and standard deviation of that column over the layer's other (kept) neurons, so it
    starts with the live neurons' scale and their shared mean direction (in a trained sparse
    layer, the component that keeps gates mostly off) instead of firing on about half the tokens
    as a zero-mean draw would; with fewer than two kept neurons, nn.Linear's default init
    U(-1/√K, 1/√K). Each re-initialised neuron's down_proj weights (column n of
    down_proj.weight) are set to zero: the layer's output is unchanged at the moment of the
    re-init, and the neuron's first firings give them a gradient (dWd = Tmᵀ·dy).

    optimizer: its per-parameter state laid out like the parameter (Adam's exp_avg, exp_avg_sq,
    SGD's momentum_buffer, ...) has the re-initialised rows reset: second moments (exp_avg_sq,
    max_exp_avg_sq) to the kept rows' mean, everything else to zero; scalar state (step) stays.
    generator: a CPU torch.Generator for the draws (default: torch's global one)."""
    g = mlp.gate_proj.weight
    N = g.shape[0]
    neurons = torch.as_tensor(neurons)
    if neurons.dtype == torch.bool:
        if tuple(neurons.shape) != (N,):
            raise invalid(f"twellrt.reinit_neurons: the mask has shape {tuple(neurons.shape)}, expected ({N},)")
        mask = neurons.to("cpu")
    else:
        if neurons.is_floating_point() or neurons.is_complex():
            raise invalid(f"twellrt.reinit_neurons: neurons must be a bool mask or integer indices, got {neurons.dtype}")
        idx = neurons.to(device="cpu", dtype=torch.int64).reshape(-1)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= N):
            raise invalid(f"twellrt.reinit_neurons: neuron indices must lie in [0, {N}), got {idx.tolist()}")
        mask = torch.zeros(N, dtype=torch.bool)
        mask[idx] = True
    idx = mask.nonzero().flatten()
    if idx.numel() == 0:
        return 0
    live = ~mask
    for i, (param, rows) in enumerate(_neuron_rows(mlp)):
        dev_idx, dev_live = idx.to(rows.device), live.to(rows.device)
        if i < 2:
            new = _live_draw(rows, dev_idx, dev_live, generator)
            rows[dev_idx] = new.to(rows.dtype)
        else:
            rows[dev_idx] = 0
        transposed = rows is not param
        _reset_optimizer_rows(optimizer, param, (lambda t: t.t()) if transposed else (lambda t: t), dev_idx, dev_live)
    return int(idx.numel())


def reinit_dead_neurons(tracker: ActivityTracker, *, optimizer=None, generator: Optional[torch.Generator] = None,
                        min_steps: int = 1) -> Dict[str, int]:
    """Re-initialises (reinit_neurons) the neurons that fired in none of the tracker's window
    steps, in every layer that has seen at least `min_steps` steps, then starts a new window.
    Returns how many neurons were re-initialised per layer."""
    if isinstance(min_steps, bool) or not isinstance(min_steps, int) or min_steps < 1:
        raise invalid(f"twellrt.reinit_dead_neurons: min_steps must be an int >= 1, got {min_steps!r}")
    steps, dead = tracker.steps(), tracker.dead()
    done = {}
    for name, mlp in tracker.layers.items():
        done[name] = reinit_neurons(mlp, dead[name], optimizer=optimizer, generator=generator) if steps[name] >= min_steps else 0
    tracker.reset()
    return done

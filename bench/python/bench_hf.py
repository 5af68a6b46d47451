"""Hugging Face model benchmark: transformers' LlamaForCausalLM with its dense MLPs against the same
model with twellrt's (twellrt.swap_mlps: same weights), side by side in one process.

    python bench/python/bench_hf.py [--models 1.5b,2b,7b] [--checkpoint DIR ...] [--out DIR]
        [--stages prefill,decode,train | STAGE:MODE,...] [--prefill-batches 1,8] [--prefill-modes eager,compiled]
        [--decode-batches 1,8,32,128] [--decode-modes static,eager] [--train-batches 4]
        [--reps 5] [--budget-s SECONDS]
    python bench/python/bench_hf.py --smoke --out /tmp/s   # tiny model, any device, under a minute

Needs twellrt importable (PYTHONPATH=python with TWELL_LIBRARY=<build>/libtwellrt.so, or the
installed package) and transformers. Stages run in the order given, each for every mode and batch
(or STAGE:MODE for one mode: --stages prefill:eager,train,decode:static,prefill:compiled);
--budget-s stops starting new measurements after that many seconds (they are recorded as skipped).

Models: the shapes of hf_synth.SHAPES (1.5b, 2b: bench_model's; 7b: hidden 4096,
intermediate 11008, 32 layers, 32 heads), hidden_act="relu", SDPA attention, bf16, with synthetic
weights calibrated to trained-like activity (bench_model.calibrate: 0.51% of N active per token on
average over layers, low first layers, a bump in the early-middle ones, 30% dead neurons, first
tokens far denser); or a SparseLM checkpoint directory (twellrt.load_sparse_lm), run on random
tokens.

Per model, first a check: logits of twellrt and of the dense bf16 model against the dense model in
fp32 (relative L2 over all logits, and the worst token's); twellrt fails it if its error exceeds
1.25 × dense's + 0.02. Then, dense and twellrt in alternating rounds (medians; CUDA events on a GPU,
perf_counter on the CPU), warm-up calls first:
  prefill   model(ids [B, seq], use_cache=False, logits_to_keep=1), tokens/ms; eager, or
            torch.compile(model, dynamic=False) (inductor on a GPU, aot_eager on the CPU);
  decode    generate(prompt [B, prompt-len], max_new_tokens = min_new_tokens = new-tokens, greedy),
            tokens/s = B / the median time between consecutive generated tokens (a logits
            processor marks each step); "static": cache_implementation="static" with Transformers'
            compiled step (inductor, reduce-overhead: CUDA graphs; the twellrt MLPs reserve first);
            "eager": the dynamic cache, nothing compiled;
  train     forward with labels (cross-entropy) + backward, tokens/ms; the L1 term (--l1) in both:
            twellrt's backward adds it, the dense model adds l1 · Σ|h| / tokens per layer to its loss.
Each measurement also runs each variant alone for at least --energy-min-s seconds: energy per token
(NVML's total-energy counter, else sampled power; board energy, "n/a" without NVML) and peak memory
(the model's weights + the most torch allocated above its start + for twellrt the device memory the
library holds outside torch's allocator).

Output: a progress line per measurement on stderr, a table on stdout, and DIR/bench_hf.json: one
record per measurement (meter.SCHEMA; fields in BENCHMARKS.md), rewritten after every record.
ratio = twellrt ÷ dense: the speedup for throughputs, the fraction of dense's for energy and
memory. Exit status 1 when a check failed or a measurement raised."""

from __future__ import annotations

import argparse
import copy
import gc
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_synth  # noqa: E402
import meter  # noqa: E402

STAGES = ("prefill", "decode", "train")
PREFILL_MODES = ("eager", "compiled")
DECODE_MODES = ("static", "eager")
GIB = 2.0**30
UNITS = dict(prefill="tokens/ms", decode="tokens/s", train="tokens/ms", check="rel")  # of a stage's main metric
# (full run, --smoke) defaults of the options that --smoke shrinks
DEFAULTS = dict(
    models=("1.5b,2b,7b", "smoke"), seq=(2048, 64), prefill_batches=("1,8", "1,2"),
    decode_batches=("1,8,32,128", "1,2"), prompt_len=(64, 8), new_tokens=(64, 4), train_batches=("4", "1"),
    reps=(5, 2), decode_reps=(3, 2), warmup=(2, 1), energy_min_s=(1.0, 0.0), calib_batch=(4, 4), check_seq=(512, 32),
)
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def _ints(s: str) -> list:
    return [int(v) for v in str(s).split(",") if v.strip()]


def _names(s: str, allowed) -> list:
    out = [v.strip() for v in str(s).split(",") if v.strip()]
    bad = [v for v in out if allowed is not None and v not in allowed]
    if bad:
        raise SystemExit(f"bench_hf: unknown {bad}; choose from {list(allowed)}")
    return out


_MARKS = []


def step_marks(clock):
    """A logits processor that only marks the time of each generated token (scores unchanged):
    its .marks are clock marks, one per token."""
    if not _MARKS:  # transformers is imported late, so the class is made on first use
        import transformers

        class StepMarks(transformers.LogitsProcessor):
            def __init__(self, clock):
                self.clock, self.marks = clock, []

            def __call__(self, input_ids, scores):
                self.marks.append(self.clock.mark())
                return scores

        _MARKS.append(StepMarks)
    return _MARKS[0](clock)


class Bench:
    def __init__(self, a, device):
        self.a, self.dev = a, device
        self.clock = meter.Clock(device)
        self.energy = meter.Energy(device, a.energy)
        self.records = meter.Records(a.out, meter.environment(device))
        self.bad = 0
        env = self.records.env
        log(f"device {env['gpu']}, torch {env['torch']}, transformers {env['transformers']}, twellrt {env['twellrt_version']}, "
            f"commit {env['commit']}; energy: {self.energy.method} {self.energy.note}".rstrip())

    # ---- records ----

    def rec(self, m, stage, mode, batch, metric, units, better, dense, twellrt, **kw):
        r = self.records.add(model=m["name"], source=m["info"]["source"], shape=m["shape"], stage=stage, mode=mode,
                             batch=batch, metric=metric, units=units, better=better, dense=dense, twellrt=twellrt,
                             energy_method=self.energy.method, **kw)
        if r["status"] in ("failed", "error"):
            self.bad += 1
        return r

    @staticmethod
    def _main(stage):
        """metric, units and better of a stage's main record (the one a skip or an error replaces)."""
        return ("logits_rel_err", "rel", "lower") if stage == "check" else ("throughput", UNITS[stage], "higher")

    def over_budget(self) -> bool:
        return bool(self.a.budget_s) and time.monotonic() - T0 > self.a.budget_s

    def guarded(self, m, stage, mode, batch, fn):
        """Runs one measurement; a budget overrun or an exception (out of memory included) becomes a
        record saying so, and the run goes on."""
        what = f"{m['name']} {stage} {mode} batch {batch}"
        if self.over_budget():
            log(f"{what}: skipped (past --budget-s {self.a.budget_s})")
            self.rec(m, stage, mode, batch, *self._main(stage), None, None, status="skipped", note="budget")
            return
        log(f"{what} ...")
        try:
            fn()
        except Exception as e:  # recorded, and the next measurement runs
            msg = f"{type(e).__name__}: {e}"
            log(f"{what}: ERROR {msg[:300]}")
            traceback.print_exc(file=sys.stderr)
            self.rec(m, stage, mode, batch, *self._main(stage), None, None, status="error", note=msg[:2000])
        finally:
            gc.collect()
            if self.dev.type == "cuda":
                torch.cuda.empty_cache()

    # ---- measuring ----

    def ids(self, m, B, S, seed):
        g = torch.Generator().manual_seed(seed)
        return hf_synth.make_ids(B, S, m["vocab"], m["bos"], g, self.dev)

    def windows(self, m, fns: dict, tokens_per_call: int, reset=None):
        """Each variant alone for --energy-min-s: {name: (mJ/token or None, peak GiB or None, extra)}.
        reset() runs before each, so that the peak above the start counts what a call allocates."""
        out = {}
        for name, fn in fns.items():
            if reset is not None:
                reset()
            calls, joules, above = meter.window(self.clock, self.energy, fn, self.a.energy_min_s, True)
            mj = None if joules is None else joules * 1e3 / (calls * tokens_per_call)
            peak, parts = None, {}
            if above is not None:
                lib = 0
                if name == "twellrt":
                    now = meter.outside_torch_bytes()
                    lib = max(0, now - m["outside_base"]) if now is not None and m["outside_base"] is not None else 0
                weights = m["weight_bytes"][name]
                peak = (weights + above + lib) / GIB
                parts = dict(weights_gib=weights / GIB, activations_gib=above / GIB, library_gib=lib / GIB)
            out[name] = (mj, peak, dict(energy_calls=calls, **parts))
        return out

    def emit(self, m, stage, mode, batch, tput, units, win, extra, status="ok", note="", **kw):
        """The throughput, energy-per-token and peak-memory records of one measurement (status and
        note are the throughput's: a failed self-check)."""
        r = self.rec(m, stage, mode, batch, "throughput", units, "higher", tput["dense"], tput["twellrt"], extra=extra,
                     status=status, note=note, **kw)
        e = {n: win[n][0] for n in win}
        p = {n: win[n][1] for n in win}
        have_e = all(v is not None for v in e.values())
        self.rec(m, stage, mode, batch, "energy_per_token", "mJ/token", "lower", e["dense"], e["twellrt"],
                 status="ok" if have_e else "n/a",
                 note=("per generated token, the prompt's prefill included" if stage == "decode" else "") if have_e
                 else f"energy {self.energy.method} {self.energy.note}".strip(),
                 extra={n: win[n][2] for n in win}, **kw)
        have_p = all(v is not None for v in p.values())
        self.rec(m, stage, mode, batch, "peak_memory", "GiB", "lower", p["dense"], p["twellrt"],
                 status="ok" if have_p else "n/a", note="" if have_p else "no CUDA memory statistics",
                 extra={n: win[n][2] for n in win}, **kw)
        es = f"; mJ/token {e['dense']:.3g} -> {e['twellrt']:.3g}" if have_e else ""
        ps = f"; peak GiB {p['dense']:.1f} -> {p['twellrt']:.1f}" if have_p else ""
        ratio = "?" if r["ratio"] is None else f"{r['ratio']:.3f}x"
        log(f"{m['name']} {stage} {mode} batch {batch}: {tput['dense']:.4g} -> {tput['twellrt']:.4g} {units} "
            f"({ratio}){es}{ps}{'' if status == 'ok' else ' ' + status.upper() + ': ' + note}")

    def compiled(self, m, name):
        key = "compiled_" + name
        if key not in m:
            m[key] = torch.compile(m[name], dynamic=False, backend=self.a.backend)
        return m[key]

    # ---- stages ----

    def check(self, m):
        S = min(self.a.check_seq, self.a.seq)
        ids = self.ids(m, 2, S, 11)
        with torch.no_grad():
            ld = m["dense"](input_ids=ids, use_cache=False).logits.float()
            lt = m["twellrt"](input_ids=ids, use_cache=False).logits.float()
            if self.a.no_fp32:
                lr = ld
            else:
                f32 = copy.deepcopy(m["dense"]).float()
                lr = f32(input_ids=ids, use_cache=False).logits.float()
                del f32

        def err(x, ref):
            tok = ((x - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)).max().item()
            return ((x - ref).norm() / ref.norm()).item(), tok

        (ed, td), (et, tt), (ex, tx) = err(ld, lr), err(lt, lr), err(lt, ld)
        finite = bool(torch.isfinite(lt).all())
        if self.a.no_fp32:  # against dense bf16 itself: both round the same products differently
            ok = finite and ex < 0.1
        else:
            ok = finite and et <= 1.25 * ed + 0.02
        self.rec(m, "check", "fp32-reference" if not self.a.no_fp32 else "dense-reference", 2, "logits_rel_err", "rel",
                 "lower", None if self.a.no_fp32 else ed, ex if self.a.no_fp32 else et, seq=S, status="ok" if ok else "failed",
                 note="" if ok else ("non-finite twellrt logits" if not finite else "twellrt logits further from the reference than dense's"),
                 extra=dict(max_token_rel_dense=td, max_token_rel_twellrt=tt, twellrt_vs_dense=ex,
                            max_token_twellrt_vs_dense=tx))
        log(f"{m['name']} check (2x{S} tokens): logits rel err vs fp32 dense {ed:.3g}, twellrt {et:.3g} "
            f"(twellrt vs dense {ex:.3g}, worst token {tx:.3g}): {'ok' if ok else 'FAILED'}")

    def prefill(self, m, mode, B):
        S = self.a.seq
        ids = self.ids(m, B, S, 100 + B)
        fns, extra = {}, {}
        from torch._dynamo.utils import counters

        with torch.no_grad():
            for name in ("dense", "twellrt"):
                mdl = self.compiled(m, name) if mode == "compiled" else m[name]
                fns[name] = (lambda f: lambda: f(input_ids=ids, use_cache=False, logits_to_keep=1))(mdl)
                breaks = sum(counters["graph_break"].values())
                t = time.perf_counter()
                out = fns[name]().logits
                self.clock.sync()
                extra[name + "_first_call_s"] = time.perf_counter() - t
                if mode == "compiled":
                    extra[name + "_graph_breaks"] = sum(counters["graph_break"].values()) - breaks
                    want = m[name](input_ids=ids, use_cache=False, logits_to_keep=1).logits
                    extra[name + "_rel_vs_eager"] = ((out.float() - want.float()).norm() / want.float().norm()).item()
                del out
            t = self.clock.paired(fns, self.a.reps, self.a.warmup)
            win = self.windows(m, fns, B * S)
        extra.update({n + "_ms": t[n]["ms"] for n in t}, **{n + "_all_ms": t[n]["all"] for n in t})
        tput = {n: B * S / t[n]["ms"] for n in t}
        status, note = "ok", ""
        if mode == "compiled":  # compiling may round differently, but no more so for twellrt
            ed, et = extra["dense_rel_vs_eager"], extra["twellrt_rel_vs_eager"]
            if not et <= 1.5 * ed + 0.02:
                status, note = "failed", f"compiled twellrt logits {et:.3g} from eager (dense: {ed:.3g})"
        self.emit(m, "prefill", mode, B, tput, "tokens/ms", win, extra, status, note, seq=S, reps=self.a.reps)

    def decode(self, m, mode, B):
        import transformers

        P, n = self.a.prompt_len, self.a.new_tokens
        ids = self.ids(m, B, P, 200 + B)
        kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                  pad_token_id=0, eos_token_id=None)
        if mode == "static":
            cuda = self.dev.type == "cuda"
            cc = transformers.CompileConfig(backend=self.a.backend, dynamic=False,
                                            mode="reduce-overhead" if cuda and self.a.backend == "inductor" else None)
            if not cuda:
                cc._compile_all_devices = True  # Transformers' switch for compiling on the CPU
            kw.update(cache_implementation="static", compile_config=cc)
            if cuda and not m.get("reserved"):
                # Nothing may be loaded or allocated inside a captured step, and a buffer grown later
                # would leave an earlier capture pointing at the old one: one reserve, before the first
                # capture, for the largest call of the run (the eager prefill of the largest batch).
                for lyr in m["twellrt"].model.layers:
                    lyr.mlp.reserve(max(self.a.decode_batches) * P, m["nnz_reserve"])
                m["reserved"] = True
        else:
            kw.update(disable_compile=True)
        from torch._dynamo.utils import counters

        def run(model):
            marks = step_marks(self.clock)
            with torch.no_grad():
                model.generate(ids, logits_processor=transformers.LogitsProcessorList([marks]), **kw)
            return marks.marks

        extra = {}
        warm = max(self.a.warmup, 2 if mode == "static" else 1)
        for name in ("dense", "twellrt"):
            breaks, skips = sum(counters["graph_break"].values()), sum(counters["inductor"].get(k, 0) for k in ("cudagraph_skips",))
            t = time.perf_counter()
            for _ in range(warm):
                run(m[name])
            self.clock.sync()
            extra[name + "_warmup_s"] = time.perf_counter() - t
            if mode == "static":
                extra[name + "_graph_breaks"] = sum(counters["graph_break"].values()) - breaks
                extra[name + "_cudagraph_skips"] = counters["inductor"].get("cudagraph_skips", 0) - skips
                extra[name + "_compiled"] = hasattr(m[name], "_compiled_call")
        steps = {"dense": [], "twellrt": []}
        names = list(steps)
        for r in range(max(self.a.decode_reps, 1)):
            for name in names if r % 2 == 0 else names[::-1]:
                mk = run(m[name])
                steps[name] += [self.clock.between_ms(a_, b_) for a_, b_ in zip(mk, mk[1:])]
        if not steps["dense"] or not steps["twellrt"]:
            raise RuntimeError(f"generate marked fewer than 2 tokens (new_tokens {n})")
        ms = {k: statistics.median(v) for k, v in steps.items()}
        extra.update({k + "_ms_per_step": v for k, v in ms.items()}, **{k + "_mean_ms_per_step": statistics.fmean(v) for k, v in steps.items()})
        win = self.windows(m, {name: (lambda mdl: lambda: run(mdl))(m[name]) for name in names}, B * n)
        tput = {k: B * 1e3 / v for k, v in ms.items()}
        status, note = "ok", ""
        if mode == "static" and not (extra["dense_compiled"] and extra["twellrt_compiled"]):
            status, note = "failed", "generate did not compile the decode step"
        self.emit(m, "decode", mode, B, tput, "tokens/s", win, extra, status, note, seq=P, new_tokens=n,
                  reps=self.a.decode_reps)

    def train(self, m, B):
        S, lam = self.a.seq, self.a.l1
        ids = self.ids(m, B, S, 300 + B)
        hs = []
        hooks = [l.mlp.down_proj.register_forward_pre_hook(lambda mod, i: hs.append(i[0]))
                 for l in m["dense"].model.layers] if lam else []
        losses = {}

        def step(name):
            model = m[name]
            model.zero_grad(set_to_none=True)
            hs.clear()
            out = model(input_ids=ids, labels=ids, use_cache=False)
            loss = out.loss
            if name == "dense" and lam:
                loss = loss + lam * sum(h.abs().sum(dtype=torch.float32) / (h.numel() // h.shape[-1]) for h in hs)
            hs.clear()
            loss.backward()
            losses.setdefault(name, out.loss.detach())

        fns = {name: (lambda nm: lambda: step(nm))(name) for name in ("dense", "twellrt")}

        def zero():
            for name in fns:
                m[name].zero_grad(set_to_none=True)
            gc.collect()

        try:
            t = self.clock.paired(fns, self.a.reps, self.a.warmup)
            win = self.windows(m, fns, B * S, reset=zero)  # the gradients are part of a step's peak
        finally:
            for h in hooks:
                h.remove()
            zero()
        ld, lt = losses["dense"].item(), losses["twellrt"].item()
        diff = abs(lt - ld) / max(abs(ld), 1e-30)
        l0 = [l.mlp.l0.item() for l in m["twellrt"].model.layers if getattr(l.mlp, "l0", None) is not None]
        extra = dict(loss_dense=ld, loss_twellrt=lt, loss_rel_diff=diff, twellrt_l0=l0,
                     **{n + "_ms": t[n]["ms"] for n in t}, **{n + "_all_ms": t[n]["all"] for n in t})
        tput = {n: B * S / t[n]["ms"] for n in t}
        ok = diff < 0.02
        self.emit(m, "train", "eager", B, tput, "tokens/ms", win, extra, seq=S, reps=self.a.reps, l1=lam,
                  status="ok" if ok else "failed", note="" if ok else f"twellrt loss {lt} vs dense {ld}")

    # ---- one model ----

    def model(self, name, path=None):
        a = self.a
        log(f"{name}: building" + (f" from {path}" if path else ""))
        if path:
            dense, tw, info = hf_synth.checkpoint(path, self.dev, a.l1)
        else:
            dense, info = hf_synth.synthetic(name, self.dev, a.seed, a.seq, a.calib_batch, a.active, a.layers)
            tw = hf_synth.twell_copy(dense, a.l1)
        cfg = dense.config
        bos = cfg.bos_token_id if isinstance(cfg.bos_token_id, int) and cfg.bos_token_id < cfg.vocab_size else None
        m = dict(name=name, dense=dense, twellrt=tw, info=info, shape=hf_synth.shape_of(dense), vocab=cfg.vocab_size, bos=bos,
                 weight_bytes=dict(dense=meter.tensor_bytes(dense), twellrt=meter.tensor_bytes(tw)))
        self.clock.sync()
        if "activity" not in info:
            info["activity"] = hf_synth.activity(dense, self.ids(m, a.calib_batch, a.seq, 5))
        act = info["activity"]
        busiest = max(r["body"] for r in act)
        # what the CUDA-graph decode reserves per row: twice the busiest layer's mean, so that the
        # prompt's prefill (its first tokens far denser) fits the same lists
        m["nnz_reserve"] = float(min(cfg.intermediate_size, 2 * busiest + 16))
        m["outside_base"] = meter.outside_torch_bytes()  # before any twellrt call: its plans are lazy
        mean = statistics.fmean(r["body"] for r in act)
        status, note = "ok", ""
        if info.get("targets"):  # the calibration reached the model it ran through
            want = statistics.fmean(info["targets"])
            if not 0.5 <= mean / want <= 2.0:
                status, note = "failed", f"measured {mean:.1f} active per token against a target of {want:.1f}"
        self.rec(m, "setup", "-", a.calib_batch, "active_per_token", "neurons", "lower", mean, None, status=status, note=note,
                 extra=dict(activity=act, targets=info.get("targets"), build_s=info["build_s"],
                            weights_gib={k: v / GIB for k, v in m["weight_bytes"].items()}))
        log(f"{name}: {m['shape']['params'] / 1e9:.2f}B params, built in {info['build_s']:.1f}s; active/token per layer "
            + " ".join(f"{r['body']:.0f}" for r in act) + f" (mean {mean:.1f}, first tokens {statistics.fmean(r['first'] for r in act):.0f}, "
            f"dead {100 * statistics.fmean(r['dead'] for r in act):.0f}%)")
        if not a.no_check:
            self.guarded(m, "check", "-", 2, lambda: self.check(m))
        for stage, mode in a.plan:
            if stage == "prefill":
                for B in a.prefill_batches:
                    self.guarded(m, stage, mode, B, lambda: self.prefill(m, mode, B))
            elif stage == "decode":
                for B in a.decode_batches:
                    self.guarded(m, stage, mode, B, lambda: self.decode(m, mode, B))
            else:
                for B in a.train_batches:
                    self.guarded(m, stage, mode, B, lambda: self.train(m, B))
        m.clear()
        del dense, tw
        torch._dynamo.reset()
        gc.collect()
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()


def table(rows) -> str:
    out = ["| model | stage | mode | batch | metric | dense | twellrt | twellrt ÷ dense | status |", "|---|---|---|---|---|---|---|---|---|"]

    def f(v):
        return "—" if v is None else f"{v:.4g}"

    for r in rows:
        if r["stage"] == "setup":
            continue
        out.append(f"| {r['model']} | {r['stage']} | {r['mode']} | {r['batch']} | {r['metric']} ({r['units'] or '-'}) | "
                   f"{f(r['dense'])} | {f(r['twellrt'])} | {f(r['ratio'])} | {r['status']} |")
    return "\n".join(out)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model (hidden 128, 2 layers) and sizes: any device, under a minute")
    ap.add_argument("--models", help="synthetic shapes, comma-separated: " + ",".join(hf_synth.SHAPES))
    ap.add_argument("--checkpoint", action="append", default=[], help="a local SparseLM checkpoint directory (repeatable)")
    ap.add_argument("--stages", default=",".join(STAGES),
                    help="run in this order: " + ",".join(STAGES) + "; STAGE:MODE runs one mode only (prefill:compiled)")
    ap.add_argument("--prefill-modes", default=",".join(PREFILL_MODES))
    ap.add_argument("--decode-modes", default=",".join(DECODE_MODES))
    ap.add_argument("--prefill-batches")
    ap.add_argument("--decode-batches")
    ap.add_argument("--train-batches")
    ap.add_argument("--seq", type=int, help="tokens per sequence, prefill and training")
    ap.add_argument("--prompt-len", type=int, help="decode: prompt tokens per sequence")
    ap.add_argument("--new-tokens", type=int, help="decode: tokens generated per sequence (>= 2)")
    ap.add_argument("--reps", type=int, help="timed rounds, prefill and training")
    ap.add_argument("--decode-reps", type=int, help="timed generate calls per variant")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--energy", default="auto", choices=("auto", "counter", "power", "off"))
    ap.add_argument("--energy-min-s", type=float, help="seconds each variant runs alone for energy and memory")
    ap.add_argument("--calib-batch", type=int, help="sequences for the activity calibration")
    ap.add_argument("--check-seq", type=int, help="tokens per sequence of the logits check")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-fp32", action="store_true", help="check against the dense bf16 model only")
    ap.add_argument("--active", type=float, default=0.0, help="mean active neurons per token (default 0.51%% of N)")
    ap.add_argument("--layers", type=int, default=0, help="override the layer count (quick runs)")
    ap.add_argument("--l1", type=float, default=2e-5, help="L1 coefficient of the training step")
    ap.add_argument("--backend", help="torch.compile backend (default inductor on a GPU, aot_eager on the CPU)")
    ap.add_argument("--device", help="default: cuda when available, else cpu")
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no measurement after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench_hf_out", help="output folder (default $OUT)")
    a = ap.parse_args(argv)
    for k, (full, smoke) in DEFAULTS.items():
        if getattr(a, k) is None:
            setattr(a, k, smoke if a.smoke else full)
    a.models = _names(a.models, hf_synth.SHAPES) if a.models else []
    a.prefill_modes = _names(a.prefill_modes, PREFILL_MODES)
    a.decode_modes = _names(a.decode_modes, DECODE_MODES)
    modes = dict(prefill=a.prefill_modes, decode=a.decode_modes, train=["eager"])
    a.plan = []  # (stage, mode) in the order to run
    for item in _names(a.stages, None):
        stage, _, mode = item.partition(":")
        if stage not in STAGES or mode and mode not in dict(prefill=PREFILL_MODES, decode=DECODE_MODES, train=("eager",))[stage]:
            ap.error(f"--stages: unknown {item!r}; stages {list(STAGES)}, modes prefill {list(PREFILL_MODES)}, "
                     f"decode {list(DECODE_MODES)}, train ['eager']")
        a.plan += [(stage, mode)] if mode else [(stage, md) for md in modes[stage]]
    a.prefill_batches, a.decode_batches, a.train_batches = map(_ints, (a.prefill_batches, a.decode_batches, a.train_batches))
    if a.new_tokens < 2:
        ap.error("--new-tokens must be at least 2 (decode time is between generated tokens)")
    return a


def main(argv=None) -> int:
    global T0
    T0 = time.monotonic()  # progress times and --budget-s count from here
    a = parse(argv)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if a.backend is None:
        a.backend = "inductor" if dev.type == "cuda" else "aot_eager"
    # every (model, variant, shape) is its own compiled graph: more than Dynamo's default 8
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    b = Bench(a, dev)
    todo = [(n, None) for n in a.models] + [(os.path.basename(os.path.normpath(p)) or p, p) for p in a.checkpoint]
    for name, path in todo:
        if b.over_budget():
            log(f"{name}: skipped (past --budget-s)")
            b.records.add(model=name, source=path or "synthetic", shape=None, stage="setup", mode="-", batch=None,
                          metric="active_per_token", units="neurons", better="lower", dense=None, twellrt=None,
                          status="skipped", note="budget", energy_method=b.energy.method)
            continue
        try:
            b.model(name, path)
        except Exception as e:  # a model that cannot be built or loaded: recorded, the next one runs
            log(f"{name}: ERROR {type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stderr)
            b.records.add(model=name, source=path or "synthetic", shape=None, stage="setup", mode="-", batch=None,
                          metric="active_per_token", units="neurons", better="lower", dense=None, twellrt=None,
                          status="error", note=f"{type(e).__name__}: {e}"[:2000], energy_method=b.energy.method)
            b.bad += 1
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    print(table(b.records.rows))
    log(f"done: {len(b.records.rows)} records in {b.records.path}, {b.bad} failed or errored")
    return 1 if b.bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Trains a tiny Hugging Face LlamaForCausalLM (hidden_act="relu", random init) with twellrt's
sparsity recipe on the CPU and prints the active neurons per token (L0) falling: twellrt MLPs
(swap_mlps), the L1 term warmed up by L1Schedule, activity and dead neurons from ActivityTracker,
and dead neurons re-initialised by reinit_dead_neurons.

    python examples/recipe_finetune.py [--steps 300] [--l1 0.1] [--reinit-every 100]

Needs torch, transformers and the twellrt package (or PYTHONPATH=python with TWELL_LIBRARY set
to a build's libtwellrt.so). The data is synthetic repetitive text: each sequence repeats a
random pattern of 2 to 8 tokens, so after its first period every token is predictable. The
coefficient is far above a real model's (2e-5 at 0.5B-2B parameters) so that a few hundred
steps show the effect. At this size every neuron still fires somewhere in a 100-step window of
256-token steps, so the dead column stays at 0 unless --l1 is raised (about 0.4)."""

from __future__ import annotations

import argparse
import sys
import time

import torch


def batches(vocab: int, batch: int, seq: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    while True:
        rows = []
        for _ in range(batch):
            period = int(torch.randint(2, 9, (1,), generator=g))
            pattern = torch.randint(0, vocab, (period,), generator=g)
            rows.append(pattern.repeat(seq // period + 1)[:seq])
        yield torch.stack(rows)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--l1", type=float, default=0.1, help="target L1 coefficient (l1_coef)")
    ap.add_argument("--warmup-start", type=int, default=0, help="sparsity_start_warmup_step")
    ap.add_argument("--warmup-end", type=int, default=None, help="sparsity_end_warmup_step (default: a third of --steps)")
    ap.add_argument("--reinit-every", type=int, default=100, help="re-initialise dead neurons every N steps (0: never)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the model is tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    import transformers

    import twellrt

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    say = (lambda *s: None) if a.quiet else (lambda *s: print(*s, flush=True))
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="relu", max_position_embeddings=a.seq,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    T = next(t for t in (256, 128, 64) if a.intermediate % t == 0)
    twellrt.swap_mlps(model, T=T, C=8)
    schedule = twellrt.L1Schedule(a.l1, a.warmup_start, a.steps // 3 if a.warmup_end is None else a.warmup_end)
    tracker = twellrt.ActivityTracker(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    data = batches(a.vocab, a.batch, a.seq, a.seed + 1)

    say(f"tiny Llama: {a.layers} layers, K {a.hidden}, N {a.intermediate}; {schedule}; "
        f"{a.batch}×{a.seq} tokens a step, {a.steps} steps")
    say(f"{'step':>5} {'loss':>7} {'l1_coef':>8}  L0 per layer (active neurons/token)   dead")
    layers = list(tracker.layers.values())
    l0_sum, n_sum = torch.zeros(len(layers), dtype=torch.float64), 0
    log, reinit, t0 = [], [], time.time()
    for step in range(a.steps):
        coef = schedule.apply(model, step)
        ids = next(data)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        l0_sum += torch.stack([m.l0 for m in layers])  # each layer's L0 of this step's forward
        n_sum += 1
        last = step == a.steps - 1
        if (step + 1) % a.log_every == 0 or last:
            l0 = (l0_sum / n_sum).tolist()  # the mean over the steps since the last line
            l0_sum.zero_()
            n_sum = 0
            dead = list(tracker.dead_counts().values())  # since the last re-initialisation
            log.append(dict(step=step + 1, loss=loss.item(), l1_coef=coef, l0=l0, mean_l0=sum(l0) / len(l0), dead=dead))
            say(f"{step + 1:>5} {loss.item():7.3f} {coef:8.4f}  "
                + " ".join(f"{v:7.1f}" for v in l0) + "   " + " ".join(f"{v:4d}" for v in dead))
        if a.reinit_every and (step + 1) % a.reinit_every == 0 and not last:
            done = twellrt.reinit_dead_neurons(tracker, optimizer=opt)  # and a new window begins
            reinit.append(dict(step=step + 1, neurons=list(done.values())))
            say(f"      re-initialised the neurons dead since the last re-init: {list(done.values())} per layer")
    tracker.remove()
    first, final = log[0]["mean_l0"], log[-1]["mean_l0"]
    say(f"L0 {first:.1f} -> {final:.1f} active neurons per token of {a.intermediate} "
        f"({100 * final / a.intermediate:.1f}%), {time.time() - t0:.1f} s")
    return dict(log=log, reinit=reinit, first_l0=first, final_l0=final, final_loss=log[-1]["loss"])


if __name__ == "__main__":
    main(sys.argv[1:])

"""Tiny Hugging Face causal LMs (Llama, Qwen2, Mistral with hidden_act="relu") whose weights are
set so that the MLPs are as sparse as a trained ReLU model's and greedy decoding has wide margins.

Sparsity: channel 0 of the residual stream is a constant (embedding column 0 is 1, and row 0 of
every o_proj and down_proj is 0, so nothing is added to it); after the norms it acts as a bias
input, and gate column 0 = -t puts each neuron's pre-activation near N(-t·x0, 1) (_data.layer does
the same with x[:, 0] = 1).
Margins: lm_head row π(u) is token u's embedding, so the logit of π(current token) is
about ‖e‖² / rms against about ‖e‖ / rms for the others: greedy decoding follows the permutation π
unless attention and the MLPs change the residual a lot, so the dense and twellrt models pick the
same tokens while their logits still differ by the MLPs' rounding."""

import math
from statistics import NormalDist

import torch

import twellrt

HIDDEN, INTER, LAYERS, VOCAB = 64, 256, 2, 96
T, C = 64, 8  # the modules' tile: N = INTER must be a multiple of T, K = HIDDEN of 16
ARCHS = ("llama", "qwen2", "mistral")


def config(arch, **kw):
    import transformers

    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
           "mistral": transformers.MistralConfig}[arch]
    args = dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="relu", max_position_embeddings=128,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    if arch == "mistral":
        args["sliding_window"] = None
    args.update(kw)
    return cls(**args)


@torch.no_grad()
def sparsify(model, nnz=8.0, seed=0):
    """Overwrites the weights of `model` in place as the module docstring says: each MLP gets
    about `nnz` active neurons per token (more in later layers, whose residual is larger)."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=g) * std

    base = model.model
    K = base.config.hidden_size
    emb = randn(*base.embed_tokens.weight.shape)
    emb[:, 0] = 1.0
    base.embed_tokens.weight.copy_(emb)
    perm = torch.randperm(emb.shape[0], generator=g)  # next token of u is perm[u]
    head = torch.empty_like(emb)
    head[perm] = emb
    model.lm_head.weight.copy_(head)
    for i, lyr in enumerate(base.layers):
        a, mlp = lyr.self_attn, lyr.mlp
        for lin, std in ((a.q_proj, 1.0), (a.k_proj, 1.0), (a.v_proj, 1.0), (a.o_proj, 0.5)):
            lin.weight.copy_(randn(*lin.weight.shape, std=std / math.sqrt(lin.weight.shape[1])))
            if lin.bias is not None:
                lin.bias.copy_(randn(*lin.bias.shape, std=0.1))
        a.o_proj.weight[0] = 0.0  # keeps the residual's constant channel
        N = mlp.up_proj.weight.shape[0]
        t = NormalDist().inv_cdf(1.0 - nnz / N)
        wg = randn(N, K, std=1.0 / math.sqrt(K))
        wg[:, 0] = -t
        mlp.gate_proj.weight.copy_(wg)
        mlp.up_proj.weight.copy_(randn(N, K, std=1.0 / math.sqrt(K)))
        wd = randn(K, N, std=1.0 / math.sqrt(K))
        wd[0] = 0.0
        mlp.down_proj.weight.copy_(wd)


def dense_model(arch, device="cpu", seed=0, **kw):
    import transformers

    torch.manual_seed(seed)
    # built in bf16 (not cast after) so that the rotary frequencies stay fp32, as from_pretrained
    # makes them
    m = transformers.AutoModelForCausalLM.from_config(config(arch, **kw), dtype=torch.bfloat16)
    sparsify(m, seed=seed)
    return m.to(device).eval()


def twell_copy(dense, **kw):
    """A copy of `dense` (same weights) with twellrt MLPs (swap_mlps with the tests' T, C)."""
    import copy

    m = copy.deepcopy(dense)
    n = twellrt.swap_mlps(m, T=T, C=C, **kw)
    assert n == dense.config.num_hidden_layers
    return m


def prompt(B, S, device="cpu", seed=1):
    return torch.randint(0, VOCAB, (B, S), generator=torch.Generator().manual_seed(seed)).to(device)


def activity(model, ids):
    """Mean active neurons per token of each layer of a dense model (non-zero inputs of
    down_proj)."""
    seen = []
    hs = [l.mlp.down_proj.register_forward_pre_hook(lambda mod, inp: seen.append((inp[0] != 0).float().sum(-1).mean().item()))
          for l in model.model.layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hs:
            h.remove()
    return seen


def grads(model):
    """Each parameter's gradient under its state_dict name and in its state_dict layout (the
    modules present the Hugging Face layout whatever they store): the parameters' data are
    pointed at their gradients while state_dict is taken."""
    saved = [(p, p.data) for p in model.parameters()]
    try:
        for p, d in saved:
            p.data = p.grad if p.grad is not None else torch.full_like(d, float("nan"))
        return {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    finally:
        for p, d in saved:
            p.data = d

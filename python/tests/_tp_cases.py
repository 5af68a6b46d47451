"""What each rank runs in the multi-process tests of test_parallel.py (importable by spawned
processes). Every function takes (rank, world, ...) inside an initialised process group and
returns plain tensors and numbers for the parent to check; all ranks build the same full layer
or model from fixed seeds, as a checkpoint load would."""

import torch
import torch.distributed as dist

import twellrt
from twellrt import activity, balance
from twellrt import bench_model as bm

T = 64  # small tiles keep the CPU backend fast and still give several tiles per shard


def _dev(device, rank):
    return torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")


def _ref(x, sd):
    """fp64 reference of the layer with the gate rounded to bf16 as the library stores it."""
    xd = x.double().cpu()
    g = torch.relu(xd @ sd["gate_proj.weight"].double().cpu().T).to(torch.bfloat16).double()
    h = g * (xd @ sd["up_proj.weight"].double().cpu().T)
    return (h @ sd["down_proj.weight"].double().cpu().T).float()


def _rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _gather(t, world):
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return parts


def layer_data(K, N, M, device, seed=0, profile="clustered"):
    sd = activity.synthetic_layer(K, N, activity.firing_probs(N, 6.0, profile, seed), seed)
    x = activity.synthetic_inputs(M, K, seed + 1, bos_every=16)  # every 16th row overflows
    return {k: v.to(device) for k, v in sd.items()}, x.to(device)


def tp_inference(rank, world, device):
    dev = _dev(device, rank)
    K, N, M = (128 if device == "cuda" else 64), 512, 38
    sd, x = layer_data(K, N, M, dev)
    single = twellrt.TwELLGatedMLP(K, N, T=T, device=dev)
    single.load_state_dict(sd)
    out = {}
    with torch.no_grad():
        y1 = single(x)
        ref = _ref(x, sd)
        tp = twellrt.TensorParallelGatedMLP.from_full(single)
        y2 = tp(x)
        part = tp.local(x)
        parts = _gather(part, world)
        s = parts[0]
        for p in parts[1:]:
            s = s + p
        out["n_local"] = tp.n_local
        out["tp_equals_sum_of_partials"] = torch.equal(y2, s)
        out["rel_tp_single"] = _rel(y2, y1)
        out["rel_tp_ref"] = _rel(y2, ref)
        out["rel_single_ref"] = _rel(y1, ref)
        out["replicated"] = all(torch.equal(p, y2) for p in _gather(y2, world))
        # from a state_dict on another device (a checkpoint on the CPU), with 3-D input
        tp_sd = twellrt.TensorParallelGatedMLP.from_full({k: v.cpu() for k, v in sd.items()}, T=T, device=dev)
        out["from_cpu_state_dict_equal"] = torch.equal(tp_sd(x.view(2, 19, K)).view(M, K), y2)
        # balanced layout from counts of the full module: same function
        with balance.ActivityCounter(single) as ctr:
            single(x)
        lay = balance.balanced_layout(ctr.counts[""], world, T)
        tpb = twellrt.TensorParallelGatedMLP.from_full(single, layout=lay)
        y3 = tpb(x)
        out["rel_balanced_single"] = _rel(y3, y1)
        out["imbalance_before_after"] = (
            balance.imbalance(ctr.counts[""], twellrt.contiguous_layout(N, world, T)),
            balance.imbalance(ctr.counts[""], lay),
        )
        # counts collected on the tensor-parallel model, summed over ranks = the full module's
        with balance.ActivityCounter(tpb) as ctp:
            tpb(x)
        ctp.all_reduce()
        out["tp_counts_diff"] = (ctp.counts[""] - ctr.counts[""]).abs().sum().item()
        # sequence parallelism: reduce-scatter of y, and gather of x + reduce-scatter
        rs = twellrt.TensorParallelGatedMLP.from_full(single, reduce="reduce_scatter")
        chunk = M // world
        out["reduce_scatter_equal"] = torch.equal(rs(x), y2[rank * chunk:(rank + 1) * chunk])
        sp = twellrt.TensorParallelGatedMLP.from_full(single, reduce="reduce_scatter", gather_input=True)
        try:
            rs(x[:M - 1])
            out["odd_rows_rejected"] = world == 1 or (M - 1) % world == 0
        except twellrt.TwellInvalidArgument:
            out["odd_rows_rejected"] = True
        out["sequence_parallel_equal"] = torch.equal(sp(x[rank * chunk:(rank + 1) * chunk]), y2[rank * chunk:(rank + 1) * chunk])
        # hidden width not a multiple of world·T: padded with zero neurons
        Np = 448  # 7 tiles
        sdp, _ = layer_data(K, Np, M, dev, seed=3)
        fp = twellrt.TwELLGatedMLP(K, Np, T=T, device=dev)
        fp.load_state_dict(sdp)
        try:
            twellrt.TensorParallelGatedMLP.from_full(fp)
            out["unpadded_rejected"] = world == 1 or (Np // world) % T == 0
        except twellrt.TwellInvalidArgument:
            out["unpadded_rejected"] = True
        tpp = twellrt.TensorParallelGatedMLP.from_full(fp, pad=True)
        out["padded_n_local"] = tpp.n_local
        out["rel_padded_single"] = _rel(tpp(x), fp(x))
    return out


def tp_training(rank, world, device, lam=0.02):
    """Training through the tensor-parallel layer: y, dx and the shard's weight gradients against
    the full module's (its slices), with the L1 term on."""
    dev = _dev(device, rank)
    K, N, M = (128 if device == "cuda" else 64), 512, 38
    sd, x = layer_data(K, N, M, dev, profile="skewed")
    single = twellrt.TwELLGatedMLP(K, N, l1_coef=lam, T=T, device=dev)
    single.load_state_dict(sd)
    dy = torch.randn(M, K, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16).to(dev)
    xa = x.clone().requires_grad_()
    ya = single(xa)
    ya.backward(dy)
    tp = twellrt.TensorParallelGatedMLP.from_full(single)
    xb = x.clone().requires_grad_()
    yb = tp(xb)
    yb.backward(dy)
    nb = tp.neurons.to(dev)
    assert (nb >= 0).all()
    # sequence parallel: this rank's rows in, all-gathered inside, y reduce-scattered back; the
    # backward reduce-scatters dx and all-gathers dy
    sp = twellrt.TensorParallelGatedMLP.from_full(single, reduce="reduce_scatter", gather_input=True)
    c = M // world
    rows = slice(rank * c, (rank + 1) * c)
    xc = x[rows].clone().requires_grad_()
    yc = sp(xc)
    yc.backward(dy[rows])
    sp_out = {
        "rel_sp_y": _rel(yc, ya[rows]),
        "rel_sp_dx": _rel(xc.grad, xa.grad[rows]),
        "rel_sp_dwg": _rel(sp.local.gate_proj.weight.grad, single.gate_proj.weight.grad[nb]),
        "rel_sp_dwd": _rel(sp.local.down_proj.weight.grad, single.down_proj.weight.grad[:, nb]),
    }
    return sp_out | {
        "rel_y": _rel(yb, ya),
        "rel_dx": _rel(xb.grad, xa.grad),
        "rel_dwg": _rel(tp.local.gate_proj.weight.grad, single.gate_proj.weight.grad[nb]),
        "rel_dwu": _rel(tp.local.up_proj.weight.grad, single.up_proj.weight.grad[nb]),
        "rel_dwd": _rel(tp.local.down_proj.weight.grad, single.down_proj.weight.grad[:, nb]),
    }


# ---------------------------------------------------------------------------------------------
# data-parallel training of bench_model's small ("tiny") model
# ---------------------------------------------------------------------------------------------

LAM, LR, SEQ, BATCH, STEPS = 2e-5, 0.05, 32, 4, 3


def tiny_model(device, seed=0):
    d, n, L, H = bm.SHAPES["tiny"]
    torch.manual_seed(seed)
    model = bm.Model(d, n, L, H, device)
    bm.init_weights(model, seed)
    gen = torch.Generator().manual_seed(seed + 7)
    bm.calibrate(model, bm.layer_targets(L), bm.make_ids(2, SEQ, gen, device), seed)
    assert twellrt.swap_mlps(model, l1_coef=LAM) == L
    ids = bm.make_ids(BATCH, SEQ, gen, device)
    return model, ids, torch.roll(ids, -1, 1)


def _loss(model, ids, labels):
    logits = model(ids)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def train_steps(model, ids, labels, wrap=None):
    """STEPS of SGD; returns the losses and the first step's gradients (fp32, by name)."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    runner = wrap if wrap is not None else model
    losses, grads = [], None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = _loss(runner, ids, labels)
        loss.backward()
        if step == 0:
            grads = {k: _full(p.grad).float().cpu() for k, p in model.named_parameters()}
        opt.step()
        losses.append(loss.detach())
    return losses, grads


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def single_reference(device="cpu"):
    model, ids, labels = tiny_model(torch.device(device))
    losses, grads = train_steps(model, ids, labels)
    return [l.item() for l in losses], grads


def ddp_training(rank, world, device, kind="ddp"):
    """The global batch split over the ranks; DDP (or FSDP2's fully_shard) averages the
    gradients. The loss reported is the mean of the ranks' losses (= the global batch's mean)."""
    dev = _dev(device, rank)
    model, ids, labels = tiny_model(dev)
    b = BATCH // world
    ids, labels = ids[rank * b:(rank + 1) * b], labels[rank * b:(rank + 1) * b]
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrap = DDP(model, device_ids=[rank] if device == "cuda" else None)
        losses, grads = train_steps(model, ids, labels, wrap)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device, (world,))
        for lyr in model.layers:
            fully_shard(lyr, mesh=mesh)
        fully_shard(model, mesh=mesh)
        losses, grads = train_steps(model, ids, labels)
    out = []
    for l in losses:
        l = l.clone()
        dist.all_reduce(l)
        out.append(l.item() / world)
    return out, grads

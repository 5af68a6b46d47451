# docs/lab/warp_imbalance_model.py — how much of phases A/B a per-chunk barrier would cost if warps
# ran independently (NOTES-fused.md, the TMA ring): uniform synthetic data (29.3 active of 5632 per
# token), groups of 8 tokens, chunks of 512 neurons, lists padded to 8; work per group visit from
# the SASS counts of the rounds (instructions): phase A full round 57, half 37, visit 26; phase B
# 49, 34, 21. Pure Python: python3 docs/lab/warp_imbalance_model.py
import random
random.seed(1)
N, CN, NNZ = 5632, 512, 29.3
p = NNZ / N
def group_sizes():
    # active pairs of 8 tokens in one chunk: sum of 8*512 Bernoulli(p) ~ Poisson(8*512*p)
    lam = 8 * CN * p
    # Poisson sample
    import math
    L, k, q = math.exp(-lam), 0, 1.0
    while True:
        q *= random.random()
        if q < L:
            return k
        k += 1
def cost(n, full, half, visit):
    s = (n + 7) // 8 * 8
    return full * (s // 16) + half * ((s % 16) // 8) + visit
for name, gpw, (f, h, v) in (("A", 8, (57, 37, 26)), ("B", 4, (49, 34, 21))):
    ratios, sorted_ratios = [], []
    for trial in range(4000):
        warps = []
        allg = []
        for w in range(16):
            gs = [group_sizes() for _ in range(gpw)]
            allg += gs
            warps.append(sum(cost(n, f, h, v) for n in gs))
        mean = sum(warps) / 16
        ratios.append(max(warps) / mean)
        # greedy balance: deal groups (largest first) to the least loaded warp (LPT)
        loads = [0] * 16
        for n in sorted(allg, reverse=True):
            i = loads.index(min(loads))
            loads[i] += cost(n, f, h, v)
        sorted_ratios.append(max(loads) / mean)
    print("phase %s: E[max warp / mean warp] per chunk = %.3f (as built), %.3f (LPT-dealt groups)" %
          (name, sum(ratios) / len(ratios), sum(sorted_ratios) / len(sorted_ratios)))
# per-chunk barrier (sum over chunks of the slowest warp) vs no barrier (slowest warp's total)
NC = 11
for name, gpw, (f, h, v) in (("A", 8, (57, 37, 26)), ("B", 4, (49, 34, 21))):
    bar, free, mean_t = 0.0, 0.0, 0.0
    for trial in range(1000):
        tot = [0] * 16
        s_bar = 0
        for c in range(NC):
            wk = [sum(cost(group_sizes(), f, h, v) for _ in range(gpw)) for _ in range(16)]
            s_bar += max(wk)
            tot = [a + b for a, b in zip(tot, wk)]
        bar += s_bar
        free += max(tot)
        mean_t += sum(tot) / 16
    print("phase %s over %d chunks: barrier per chunk %.3f x mean, no barrier %.3f x mean" %
          (name, NC, bar / mean_t, free / mean_t))
# timeline model: old = barrier per chunk, refill of c+1 issued when all finished c-1 (latency L);
# ring(ST) = warps start chunk c when its data landed (all finished c-ST, + L) and they finished c-1
def sim(work, ST, L, ring):
    NW, NCc = len(work), len(work[0])
    F = [[0.0] * NCc for _ in range(NW)]
    done = []  # max over warps of finish time per chunk
    for c in range(NCc):
        R = 0.0 if c < ST else done[c - ST] + L
        for w in range(NW):
            prev = F[w][c - 1] if c else 0.0
            if not ring and c:
                prev = done[c - 1]
            F[w][c] = max(prev, R) + work[w][c]
        done.append(max(F[w][c] for w in range(NW)))
    return done[-1]
for name, gpw, (f, h, v) in (("A", 8, (57, 37, 26)), ("B", 4, (49, 34, 21))):
    for Lf in (0.0, 0.3, 0.6):
        acc = {}
        for trial in range(400):
            work = [[sum(cost(group_sizes(), f, h, v) for _ in range(gpw)) for _ in range(NC)] for _ in range(16)]
            mean_chunk = sum(map(sum, work)) / 16 / NC
            L = Lf * mean_chunk
            base = sum(map(sum, work)) / 16
            for key, ST, ring in (("barrier ST2", 2, False), ("ring ST2", 2, True), ("ring ST3", 3, True), ("ring ST4", 4, True)):
                acc[key] = acc.get(key, 0.0) + sim(work, ST, L, ring) / base
        print("phase %s, refill latency %.1f x mean chunk: " % (name, Lf) +
              ", ".join("%s %.3f" % (k, v / 400) for k, v in acc.items()))

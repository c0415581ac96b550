#!/usr/bin/python3
# The scaling model of docs/distributed.md: predicted data-parallel efficiency of ember on N nodes
# from a node's measured step time and the all-reduce cost of its gradients (recursive halving and
# doubling, what ember runs for a power-of-two number of ranks):
#
#   T_allreduce(N) = 2 log2(N) alpha + 2 (N - 1) / N * S / beta + (N - 1) / N * S / gamma
#   efficiency(N)  = T_step / (T_step + T_allreduce(N) - overlap)
#
# S: gradient bytes; alpha: per-message latency; beta: link bandwidth; gamma: the bandwidth of the
# local sums (memory); T_step: one node's training step at its own batch (weak scaling: every node
# keeps the per-node batch, the global batch grows with N). overlap: the share of the all-reduce
# hidden behind backward (0: none, the conservative column; the optimistic column hides it up to
# `hide` of the step).
#   /usr/bin/python3 bench/scaling_model.py [--alpha-us 15] [--link-eff 0.9] [--gamma-gbs 10]
import argparse
import math

# Measured here (docs/distributed.md): 1 process x 2 threads on this 2-core Zen 4 node.
MODELS = {
    "mnist-cnn (batch 64 per node)": {"params": 805066, "step_ms": 64 / 25929 * 1e3, "hide": 0.1},
    "convnext-fashion (batch 128 per node)": {"params": 3927210, "step_ms": 128 / 1763 * 1e3, "hide": 0.5},
}


def allreduce_s(n, s_bytes, alpha, beta, gamma):
    if n == 1:
        return 0.0
    return 2 * math.log2(n) * alpha + 2 * (n - 1) / n * s_bytes / beta + (n - 1) / n * s_bytes / gamma


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--alpha-us", type=float, default=15.0, help="per-message latency (MPI over TCP: 10-30 us)")
    p.add_argument("--link-eff", type=float, default=0.9, help="share of the line rate a message reaches")
    p.add_argument("--gamma-gbs", type=float, default=10.0, help="local summing bandwidth, GB/s")
    p.add_argument("--convnext-params", type=int, default=0, help="convnext-fashion's parameter count")
    a = p.parse_args()
    if a.convnext_params:
        MODELS["convnext-fashion (batch 128 per node)"]["params"] = a.convnext_params
    alpha, gamma = a.alpha_us * 1e-6, a.gamma_gbs * 1e9
    print(f"alpha {a.alpha_us:g} us, links at {a.link_eff:.0%} of line rate, sums at {a.gamma_gbs:g} GB/s")
    print(f"{'model':40s} {'link':>8s} " + " ".join(f"{'N=' + str(n):>14s}" for n in (8, 16, 32, 64)))
    for name, m in MODELS.items():
        s_bytes = 4 * m["params"]
        t = m["step_ms"] * 1e-3
        for gbit in (25, 100):
            beta = gbit / 8 * 1e9 * a.link_eff
            cells = []
            for n in (8, 16, 32, 64):
                c = allreduce_s(n, s_bytes, alpha, beta, gamma)
                lo = t / (t + c)
                hi = t / (t + max(0.0, c - m["hide"] * t))
                cells.append(f"{100 * lo:5.0f}-{100 * hi:3.0f} %")
            print(f"{name:40s} {str(gbit) + ' Gb/s':>8s} " + " ".join(f"{c:>14s}" for c in cells))


if __name__ == "__main__":
    main()

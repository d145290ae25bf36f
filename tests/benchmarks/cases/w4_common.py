"""The W4 workloads: a no-work trainable (overhead) and the synthetic learning curve (search quality)."""

import math
import random
import time

SPACE_NOTE = "lr ~ loguniform(1e-4, 1), width ~ choice(16..512), seed ~ randint(0, 1e6)"


def curve(lr, width, it, seed):
    base = (math.log10(lr) + 2) ** 2 + (math.log2(width) - 7) ** 2 / 4
    r = random.Random(seed * 1000 + it)
    return base + 2.0 / (1 + it) + r.gauss(0, 0.5) / math.sqrt(1 + it)


def learning_curve_trainable(config, report, max_t=100):
    best = float("inf")
    for it in range(max_t):
        time.sleep(0.001)
        loss = curve(config["lr"], config["width"], it, config["seed"])
        best = min(best, loss)
        report({"loss": loss, "iterations": it + 1})

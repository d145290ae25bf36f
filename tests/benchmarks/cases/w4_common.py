"""The W4 workloads: a no-work trainable (overhead) and the synthetic learning curve (search quality)."""

import math
import os
import random
import time

SPACE_NOTE = "lr ~ loguniform(1e-4, 1), width ~ choice(16..512), seed ~ randint(0, 1e6)"
WIDTHS = [16, 32, 64, 128, 256, 512]


def curve(lr, width, it, seed):
    base = (math.log10(lr) + 2) ** 2 + (math.log2(width) - 7) ** 2 / 4
    r = random.Random(seed * 1000 + it)
    return base + 2.0 / (1 + it) + r.gauss(0, 0.5) / math.sqrt(1 + it)


def learning_curve_trainable(config, report, max_t=100):
    config = config.get("point", config)  # the drawn point itself, or the config holding it
    best = float("inf")
    for it in range(max_t):
        time.sleep(0.001)
        loss = curve(config["lr"], config["width"], it, config["seed"])
        best = min(best, loss)
        report({"loss": loss, "iterations": it + 1})


def drawn_points(n=None, seed=None):
    """W4b's configs drawn once from the W4 space (seeded), so every system searches the same points."""
    n = int(os.environ.get("W4_SAMPLES", "64")) if n is None else n
    seed = int(os.environ.get("W4_SEED", "7")) if seed is None else seed
    rng = random.Random(seed)
    return [{"lr": 10 ** rng.uniform(-4, 0), "width": rng.choice(WIDTHS), "seed": rng.randint(0, 10**6)}
            for _ in range(n)]


def summary(histories):
    """best loss and iterations spent, from each trial's list of reported losses."""
    return {"best_loss": min(min(h) for h in histories if h), "iterations": sum(len(h) for h in histories)}

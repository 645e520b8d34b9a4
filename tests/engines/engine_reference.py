"""An independent, slow reference for the behaviour distribution (per row, float64, loops)."""

import math


def reference_logprob(logits_row, token: int, temperature: float, top_k: int, top_p: float):
    """log mu(token): temperature, then top-k (ties kept), then top-p, renormalised."""
    scaled = [float(v) / temperature for v in logits_row]
    order = sorted(range(len(scaled)), key=lambda i: -scaled[i])
    kept = order
    if 0 < top_k < len(order):
        threshold = scaled[order[top_k - 1]]
        kept = [i for i in order if scaled[i] >= threshold]
    if top_p < 1.0:
        z = sum(math.exp(scaled[i] - scaled[kept[0]]) for i in kept)
        mass, nucleus = 0.0, []
        for i in kept:
            if mass >= top_p:
                break
            nucleus.append(i)
            mass += math.exp(scaled[i] - scaled[kept[0]]) / z
        kept = nucleus
    if token not in kept:
        return -math.inf
    top = scaled[kept[0]]
    log_z = top + math.log(sum(math.exp(scaled[i] - top) for i in kept))
    return scaled[token] - log_z

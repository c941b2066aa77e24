"""The softmax both learning models use: the closed-loop toy and the learning loop's NumPy reference."""


def softmax(xp, logits):
    """(p, log p) of a softmax over the last axis, from the max-shifted logits (``xp``: numpy, cupy, or anything with
    their ``exp`` and ``log``: a backend's ``math``)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    log_p = z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))
    return xp.exp(log_p), log_p

"""Cross-entropy written from log-sum-exp: exercise ``05.cross_entropy``.

For logits ``z`` [N, C] and class indices ``y`` [N]::

    loss_i = logsumexp(z_i) - z_i[y_i],      loss = mean_i loss_i

``logsumexp(z) = m + log(sum(exp(z - m)))`` with ``m = max(z)``: subtracting the row maximum
first keeps every ``exp`` in (0, 1], so logits of 1000 give a finite loss instead of
``inf - inf = nan``.  The gradient is ``(softmax(z) - onehot(y)) / N``.

``mini.nn.functional.cross_entropy`` (and ``nn.CrossEntropyLoss``) is the full PyTorch
function (class weights, label smoothing, ignore_index, probability targets); its mean over
class indices calls this slot, the core the student writes.
"""
from __future__ import annotations

import mini
from mini.exercises import exercise

__all__ = ["cross_entropy"]


def _log_softmax_nll(logits, target):
    # the stand-in while chapter 05 is unreleased (F.cross_entropy and nn.CrossEntropyLoss
    # call this slot): PyTorch's definition, nll_loss of log_softmax
    from mini.nn import functional as F
    return F.nll_loss(F.log_softmax(logits, 1), target)


@exercise("05.cross_entropy", fallback=_log_softmax_nll)
def cross_entropy(logits, target):
    """Mean cross-entropy of ``logits`` [N, C] (float) against ``target`` [N] (int64 class
    indices), computed stably (subtract each row's maximum before ``exp``).  Returns a
    0-d tensor, differentiable in ``logits``.  A target outside ``[0, C)`` raises
    IndexError; a target of the wrong shape raises ValueError."""
    ### BEGIN SOLUTION
    if logits.ndim != 2 or tuple(target.shape) != (logits.shape[0],):
        raise ValueError(f"cross_entropy: expected logits [N, C] and target [N], got "
                         f"{tuple(logits.shape)} and {tuple(target.shape)}")
    n, c = logits.shape
    t = target.detach().numpy()
    if t.size and (t.min() < 0 or t.max() >= c):
        raise IndexError(f"cross_entropy: target values must be in [0, {c}), got "
                         f"{int(t.min())}..{int(t.max())}")
    m = logits.detach().amax(dim=1, keepdim=True)      # a constant shift: no gradient needed
    shifted = logits - m
    log_z = shifted.exp().sum(dim=1, keepdim=True).log()
    log_probs = shifted - log_z                          # log-softmax, each entry <= 0
    onehot = mini.eq(target.unsqueeze(1), mini.arange(c, device=logits.device).reshape(1, c))
    onehot = onehot.to(dtype=logits.dtype)
    return -(log_probs * onehot).sum() / n
    ### END SOLUTION

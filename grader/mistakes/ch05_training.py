"""Typical wrong implementations of the chapter 05 exercises (training).

Each one is a plausible student answer; the checks of :mod:`grader.checks.ch05_training`
must fail it with a message that names the mistake.
"""
from __future__ import annotations

import math
import os

from grader.mistakes import Mistake


def _mini():
    import mini
    return mini


# --------------------------------------------------------------------- 05.parameters

def params_no_dedup(module, prefix=""):
    """Walks the tree but lists a shared parameter (and a module reached twice) again."""
    out = []

    def walk(mod, pre):
        for name, p in mod._parameters.items():
            if p is not None:
                out.append((pre + ("." if pre else "") + name, p))
        for name, child in mod._modules.items():
            if child is not None:
                walk(child, pre + ("." if pre else "") + name)

    walk(module, prefix)
    return out


def params_own_only(module, prefix=""):
    """Forgets to recurse into child modules."""
    return [(prefix + ("." if prefix else "") + n, p) for n, p in module._parameters.items()
            if p is not None]


# --------------------------------------------------------------------- 05.kaiming_init

def kaiming_no_receptive_field(tensor, mode="fan_in"):
    """fan_in = shape[1] only: a 3x3 conv gets weights 3x too large."""
    mini = _mini()
    fan = tensor.shape[1] if mode == "fan_in" else tensor.shape[0]
    with mini.no_grad():
        tensor.copy_(mini.randn(*tensor.shape, dtype=tensor.dtype) * math.sqrt(2.0 / fan))
    return tensor


def kaiming_variance_one_over_fan(tensor, mode="fan_in"):
    """LeCun's 1/fan: the signal shrinks by sqrt(2) per ReLU layer."""
    mini = _mini()
    rf = 1
    for s in tensor.shape[2:]:
        rf *= s
    fan = (tensor.shape[1] if mode == "fan_in" else tensor.shape[0]) * rf
    with mini.no_grad():
        tensor.copy_(mini.randn(*tensor.shape, dtype=tensor.dtype) * math.sqrt(1.0 / fan))
    return tensor


# --------------------------------------------------------------------- batch norm

def _bn(x, running_mean, running_var, weight, bias, training, momentum, eps, *,
        eval_batch=False, biased_running=False):
    use_batch = training or eval_batch or running_mean is None
    if use_batch:
        m = x.shape[0]
        mean = x.mean(dim=0)
        var = ((x - mean) * (x - mean)).mean(dim=0)
        if training and running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean * momentum)
            factor = 1.0 if biased_running else m / (m - 1)
            running_var.mul_(1 - momentum).add_(var * (momentum * factor))
    else:
        mean, var = running_mean, running_var
    inv_std = 1.0 / (var + eps).sqrt()
    x_hat = (x - mean) * inv_std
    return x_hat * weight + bias, x_hat, inv_std


def bn_batch_stats_at_eval(x, running_mean, running_var, weight, bias, training, momentum, eps):
    """Ignores ``training``: normalises with the batch's statistics at eval too."""
    return _bn(x, running_mean, running_var, weight, bias, training, momentum, eps,
               eval_batch=True)


def bn_biased_running_var(x, running_mean, running_var, weight, bias, training, momentum, eps):
    """Feeds the biased batch variance into the running estimate."""
    return _bn(x, running_mean, running_var, weight, bias, training, momentum, eps,
               biased_running=True)


def bn_backward_constant_stats(grad_out, x_hat, inv_std, weight):
    """Treats the batch mean and variance as constants."""
    return (grad_out * weight * inv_std, (grad_out * x_hat).sum(dim=0), grad_out.sum(dim=0))


def bn_running_momentum_swapped(x, running_mean, running_var, weight, bias, training, momentum,
                                eps):
    """Keras's convention in PyTorch's API: momentum weights the OLD running value."""
    return _bn(x, running_mean, running_var, weight, bias, training, 1.0 - momentum, eps)


def bn_backward_no_variance_path(grad_out, x_hat, inv_std, weight):
    """Subtracts the mean of g (the path through the batch mean) and stops there."""
    m = grad_out.shape[0]
    g = grad_out * weight
    return ((g * m - g.sum(dim=0)) * (inv_std / m), (grad_out * x_hat).sum(dim=0),
            grad_out.sum(dim=0))


def bn_backward_no_mean_path(grad_out, x_hat, inv_std, weight):
    """Keeps the path through the variance, forgets the one through the mean."""
    m = grad_out.shape[0]
    g = grad_out * weight
    return ((g * m - x_hat * (g * x_hat).sum(dim=0)) * (inv_std / m),
            (grad_out * x_hat).sum(dim=0), grad_out.sum(dim=0))


def kaiming_ignores_mode(tensor, mode="fan_in"):
    """Always fan_in, whatever ``mode`` says."""
    return _kaiming_with_fan(tensor, tensor.shape[1])


def _kaiming_with_fan(tensor, fan_channels):
    mini = _mini()
    rf = 1
    for s in tensor.shape[2:]:
        rf *= s
    with mini.no_grad():
        tensor.copy_(mini.randn(*tensor.shape, dtype=tensor.dtype) * math.sqrt(2.0 / (fan_channels * rf)))
    return tensor


# --------------------------------------------------------------------- 05.layernorm

def layernorm_batch_axis(x, normalized_shape, weight, bias, eps):
    """Normalises over the batch axis, like batch norm."""
    mean = x.mean(dim=0, keepdim=True)
    c = x - mean
    y = c / ((c * c).mean(dim=0, keepdim=True) + eps).sqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


# --------------------------------------------------------------------- 05.dropout

def dropout_not_rescaled(x, p=0.5, training=True):
    """Zeroes elements but forgets the 1/(1-p) scale."""
    mini = _mini()
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    return x * (mini.rand(*x.shape, dtype=x.dtype) >= p).to(dtype=x.dtype)


def dropout_scales_at_eval(x, p=0.5, training=True):
    """The blog's rule: plain dropout in training, x/(1-p)... at inference."""
    mini = _mini()
    if not training:
        return x * (1.0 / (1.0 - p)) if p < 1 else x
    if p == 1.0:
        return x * 0.0
    keep = (mini.rand(*x.shape, dtype=x.dtype) >= p).to(dtype=x.dtype)
    return x * keep * (1.0 / (1.0 - p))


# --------------------------------------------------------------------- 05.cross_entropy

def cross_entropy_naive(logits, target):
    """softmax without subtracting the maximum: exp(1000) overflows."""
    mini = _mini()
    n, c = logits.shape
    onehot = mini.eq(target.unsqueeze(1), mini.arange(c).reshape(1, c)).to(dtype=logits.dtype)
    logp = logits - logits.exp().sum(dim=1, keepdim=True).log()
    return -(logp * onehot).sum() / n


def cross_entropy_log_of_softmax(logits, target):
    """Stable softmax (the maximum subtracted), then its log: a tiny probability is 0, log 0 = -inf."""
    mini = _mini()
    n, c = logits.shape
    onehot = mini.eq(target.unsqueeze(1), mini.arange(c).reshape(1, c)).to(dtype=logits.dtype)
    e = (logits - logits.max(dim=1, keepdim=True)[0].detach()).exp()
    p = e / e.sum(dim=1, keepdim=True)
    return -(p.log() * onehot).sum() / n


# --------------------------------------------------------------------- 05.adamw_step

def adamw_eps_inside_sqrt(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                          weight_decay):
    """sqrt(v_hat + eps) instead of sqrt(v_hat) + eps."""
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    denom = (exp_avg_sq / (1 - beta2 ** step) + eps).sqrt()
    param.sub_(exp_avg / denom, alpha=lr / (1 - beta1 ** step))


def adamw_scales_grad_in_place(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                               weight_decay):
    """Right update, but builds (1 - beta1)·grad with grad.mul_: the caller's gradient changes."""
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    exp_avg.mul_(beta1).add_(grad.mul_(1 - beta1))
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    denom = exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step) + eps
    param.sub_(exp_avg / denom, alpha=lr / (1 - beta1 ** step))

def adamw_no_bias_correction(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                             weight_decay):
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    param.sub_(exp_avg / (exp_avg_sq.sqrt() + eps), alpha=lr)


def adamw_decay_in_gradient(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                            weight_decay):
    """Adam's L2: the decay rides on the gradient and gets divided by sqrt(v)."""
    g = grad + param * weight_decay
    exp_avg.mul_(beta1).add_(g, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(g * g, alpha=1 - beta2)
    denom = exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step) + eps
    param.sub_(exp_avg / denom, alpha=lr / (1 - beta1 ** step))


# --------------------------------------------------------------------- 05.warmup_cosine

def warmup_cosine_off_by_one(step, base_lr, warmup_steps, total_steps, min_lr=0.0):
    """Warmup from step/warmup: the first step has lr 0."""
    if step < warmup_steps:
        return base_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + (base_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


def warmup_cosine_no_floor_after_end(step, base_lr, warmup_steps, total_steps, min_lr=0.0):
    """The cosine keeps going after total_steps: the rate climbs back up."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + (base_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


# --------------------------------------------------------------------- checkpoints

def _state(model, optimizer, scheduler, loader, step, *, optimizer_state=True, rng=True):
    mini = _mini()
    state = {"step": int(step), "model": model.state_dict(),
             "scheduler": None if scheduler is None else scheduler.state_dict(),
             "loader": None if loader is None else loader.state_dict()}
    if optimizer_state:
        state["optimizer"] = optimizer.state_dict()
    if rng:
        state["rng"] = mini.get_rng_state()
    return state


def _save_with(path, state, *, tmp_dir=None, dir_fsync=True):
    import tempfile
    from mini import serialization
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=tmp_dir or directory, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            serialization.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if dir_fsync:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def save_temp_in_tmp(path, model, optimizer, scheduler=None, loader=None, step=0):
    """The temporary file in the system's temp folder: os.replace may cross file systems."""
    import tempfile
    _save_with(path, _state(model, optimizer, scheduler, loader, step),
               tmp_dir=tempfile.mkdtemp())


def save_without_dir_fsync(path, model, optimizer, scheduler=None, loader=None, step=0):
    """Data fsync'ed and renamed, but the directory entry is never made durable."""
    _save_with(path, _state(model, optimizer, scheduler, loader, step), dir_fsync=False)


def save_without_optimizer(path, model, optimizer, scheduler=None, loader=None, step=0):
    _save_with(path, _state(model, optimizer, scheduler, loader, step, optimizer_state=False))


def save_without_rng(path, model, optimizer, scheduler=None, loader=None, step=0):
    _save_with(path, _state(model, optimizer, scheduler, loader, step, rng=False))


def save_in_place(path, model, optimizer, scheduler=None, loader=None, step=0):
    """Writes straight onto the checkpoint's path: a crash mid-write leaves a torn file."""
    from mini import serialization
    with open(path, "wb") as f:
        serialization.save(_state(model, optimizer, scheduler, loader, step), f)


def load_without_rng(path, model, optimizer, scheduler=None, loader=None):
    from mini import serialization
    state = serialization.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    if loader is not None:
        loader.load_state_dict(state["loader"])
    return state["step"]


def load_without_optimizer(path, model, optimizer, scheduler=None, loader=None):
    mini = _mini()
    from mini import serialization
    state = serialization.load(path)
    model.load_state_dict(state["model"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    if loader is not None:
        loader.load_state_dict(state["loader"])
    mini.set_rng_state(state["rng"])
    return state["step"]


MISTAKES = [
    Mistake("05.parameters", "shared parameter listed twice", params_no_dedup, "more than once"),
    Mistake("05.parameters", "no recursion into children", params_own_only, "recurse"),
    Mistake("05.kaiming_init", "fan without the receptive field", kaiming_no_receptive_field,
            "receptive field"),
    Mistake("05.kaiming_init", "variance 1/fan", kaiming_variance_one_over_fan, "2/fan"),
    Mistake("05.batchnorm_forward", "BN uses batch statistics at eval", bn_batch_stats_at_eval,
            "running statistics"),
    Mistake("05.batchnorm_forward", "biased running variance", bn_biased_running_var,
            "unbiased"),
    Mistake("05.batchnorm_backward", "mean and variance treated as constants",
            bn_backward_constant_stats, "depend on every row"),
    Mistake("05.batchnorm_forward", "momentum weights the old running value",
            bn_running_momentum_swapped, "weight of the NEW batch statistic"),
    Mistake("05.batchnorm_backward", "no path through the batch variance",
            bn_backward_no_variance_path, "not the one through the batch variance"),
    Mistake("05.batchnorm_backward", "no path through the batch mean",
            bn_backward_no_mean_path, "not the one through the batch mean"),
    Mistake("05.kaiming_init", "mode ignored (always fan_in)", kaiming_ignores_mode,
            "you used the other one"),
    Mistake("05.cross_entropy", "log of a stable softmax underflows", cross_entropy_log_of_softmax,
            "underflowed"),
    Mistake("05.adamw_step", "eps inside the square root", adamw_eps_inside_sqrt,
            "eps went inside the square root"),
    Mistake("05.adamw_step", "the caller's grad scaled in place", adamw_scales_grad_in_place,
            "changed grad in place"),
    Mistake("05.warmup_cosine", "cosine continues after total_steps",
            warmup_cosine_no_floor_after_end, "stays at min_lr"),
    Mistake("05.layernorm", "LayerNorm over the wrong axis", layernorm_batch_axis,
            "wrong axes"),
    Mistake("05.dropout", "dropout not rescaled", dropout_not_rescaled, "not rescaled"),
    Mistake("05.dropout", "dropout scales at eval", dropout_scales_at_eval, "identity"),
    Mistake("05.cross_entropy", "cross-entropy overflows on logits of 1000", cross_entropy_naive,
            "overflow"),
    Mistake("05.adamw_step", "Adam without bias correction", adamw_no_bias_correction,
            "bias correction"),
    Mistake("05.adamw_step", "AdamW decay folded into the gradient", adamw_decay_in_gradient,
            "decouples"),
    Mistake("05.warmup_cosine", "scheduler off by one step", warmup_cosine_off_by_one,
            "off by one"),
    Mistake("05.save_checkpoint", "checkpoint missing optimizer state", save_without_optimizer,
            "no optimizer state"),
    Mistake("05.save_checkpoint", "checkpoint missing RNG state", save_without_rng,
            "random-number state"),
    Mistake("05.save_checkpoint", "non-atomic save", save_in_place, "not atomic"),
    Mistake("05.save_checkpoint", "temporary file in another directory", save_temp_in_tmp,
            "another directory"),
    Mistake("05.save_checkpoint", "rename not made durable", save_without_dir_fsync,
            "directory, which was never fsync'ed"),
    Mistake("05.load_checkpoint", "resume without the RNG state", load_without_rng,
            "random state was not restored"),
    Mistake("05.load_checkpoint", "resume without the optimizer state", load_without_optimizer,
            "optimizer state was not restored"),
]

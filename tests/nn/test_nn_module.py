"""Module: discovery of parameters, buffers and submodules; train/eval; freezing; hooks;
state_dict and load_state_dict; to(); repr."""
from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import mini
from mini import nn


class CustomLayer(nn.Module):
    """The seed's Listing 16: two parameters and one buffer."""

    def __init__(self, input_size, output_size):
        super().__init__()
        self.weight = nn.Parameter(mini.randn(output_size, input_size))
        self.bias = nn.Parameter(mini.randn(output_size))
        self.register_buffer("running_mean", mini.zeros(output_size))

    def forward(self, x):
        return mini.matmul(x, self.weight.t()) + self.bias


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.conv1 = nn.Linear(n, n)
        self.bn1 = CustomLayer(n, n)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn1(self.conv1(x)))


class Net(nn.Module):
    def __init__(self, n=4, blocks=2):
        super().__init__()
        self.stem = nn.Linear(3, n)
        self.blocks = nn.ModuleList([Block(n) for _ in range(blocks)])
        self.fc = nn.Linear(n, 2)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.fc(x)


# --- discovery -------------------------------------------------------------------------------
def test_custom_layer_parameters_and_buffer():
    layer = CustomLayer(10, 20)
    named = dict(layer.named_parameters())
    assert list(named) == ["weight", "bias"]
    assert tuple(named["weight"].shape) == (20, 10)
    assert tuple(named["bias"].shape) == (20,)
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in layer.parameters())
    # the buffer is state but not a parameter
    assert "running_mean" not in named
    assert [n for n, _ in layer.named_buffers()] == ["running_mean"]
    sd = layer.state_dict()
    assert list(sd) == ["weight", "bias", "running_mean"]
    assert not sd["running_mean"].requires_grad
    y = layer(mini.randn(5, 10))
    assert tuple(y.shape) == (5, 20)


def test_parameter_shares_memory_and_repr():
    t = mini.zeros(3)
    p = nn.Parameter(t)
    assert p.requires_grad and p.is_leaf
    with mini.no_grad():
        p.add_(1.0)
    np.testing.assert_array_equal(t.numpy(), [1, 1, 1])  # same buffer
    assert repr(p).startswith("Parameter containing:\ntensor(")
    assert not nn.Parameter(mini.zeros(2), requires_grad=False).requires_grad
    assert isinstance(p * 2, mini.Tensor) and not isinstance(p * 2, nn.Parameter)


def test_nested_state_dict_keys_and_counts():
    net = Net(n=4, blocks=2)
    keys = list(net.state_dict())
    assert keys[:2] == ["stem.weight", "stem.bias"]
    assert "blocks.0.conv1.weight" in keys
    assert "blocks.1.bn1.running_mean" in keys
    assert keys[-2:] == ["fc.weight", "fc.bias"]
    n_params = sum(p.numel() for p in net.parameters())
    per_block = (16 + 4) * 2
    assert n_params == (3 * 4 + 4) + 2 * per_block + (4 * 2 + 2)
    names = [n for n, _ in net.named_modules()]
    assert names[:4] == ["", "stem", "blocks", "blocks.0"]
    assert "blocks.1.act" in names
    assert [n for n, _ in net.named_children()] == ["stem", "blocks", "fc"]
    assert net.get_submodule("blocks.1.conv1") is net.blocks[1].conv1
    assert net.get_parameter("blocks.0.bn1.bias") is net.blocks[0].bn1.bias
    assert len(list(net.modules())) == len(names)
    assert len(list(net.parameters(recurse=False))) == 0


def test_shared_parameter_listed_once():
    a = nn.Linear(3, 3)
    m = nn.Sequential(a, nn.ReLU(), a)
    assert len(list(m.parameters())) == 2
    assert [n for n, _ in m.named_parameters()] == ["0.weight", "0.bias"]
    tied = nn.Module()
    tied.enc = nn.Linear(4, 4)
    tied.dec = nn.Linear(4, 4)
    tied.dec.weight = tied.enc.weight
    assert len(list(tied.parameters())) == 3


def test_setattr_rules():
    m = nn.Module()
    m.w = nn.Parameter(mini.ones(2))
    assert "w" in m._parameters and "w" not in m.__dict__
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'w'"):
        m.w = mini.ones(2)
    m.w = None
    assert m.w is None and list(m.parameters()) == []
    m.plain = mini.ones(2)  # a plain tensor is an ordinary attribute, not state
    assert list(m.state_dict()) == []
    m.register_buffer("buf", mini.zeros(2))
    m.buf = mini.ones(2)  # reassigning a buffer keeps it a buffer
    assert list(m.state_dict()) == ["buf"]
    with pytest.raises(TypeError):
        m.buf = 3
    m.child = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="child module 'child'"):
        m.child = 3
    del m.child
    assert not hasattr(m, "child")
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("plain", mini.ones(1))
    with pytest.raises(KeyError, match=r'contain "\."'):
        m.register_parameter("a.b", nn.Parameter(mini.ones(1)))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        m.nope
    with pytest.raises(ValueError, match="non-leaf"):
        m.register_parameter("bad", _non_leaf_param())

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(mini.ones(1))
            super().__init__()
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def _non_leaf_param():
    p = nn.Parameter(mini.ones(1))
    p.grad_fn = (p * 2).grad_fn  # a Parameter with history (what PyTorch refuses)
    return p


def test_non_persistent_buffer_and_Buffer():
    m = nn.Module()
    m.register_buffer("stat", mini.zeros(3), persistent=False)
    m.keep = nn.Buffer(mini.ones(2))
    assert [n for n, _ in m.named_buffers()] == ["stat", "keep"]
    assert list(m.state_dict()) == ["keep"]
    assert type(m.keep) is mini.Tensor


# --- modes and freezing ------------------------------------------------------------------------
def test_eval_reaches_every_submodule_and_autograd_stays_on():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    assert mini.is_grad_enabled()
    out = net(mini.randn(2, 3))
    assert out.requires_grad and out.grad_fn is not None
    net.train()
    assert all(m.training for m in net.modules())
    net.blocks.train(False)
    assert net.training and not net.blocks[1].conv1.training
    with pytest.raises(ValueError, match="boolean"):
        net.train("no")


def test_frozen_parameters_listed_but_only_head_gets_grad():
    net = Net()
    net.requires_grad_(False)
    net.fc = nn.Linear(4, 2)
    assert len(list(net.parameters())) == 2 + 2 * 4 + 2
    net(mini.randn(5, 3)).sum().backward()
    for name, p in net.named_parameters():
        if name.startswith("fc."):
            assert p.grad is not None and tuple(p.grad.shape) == tuple(p.shape)
        else:
            assert p.grad is None, name
    trainable = [p for p in net.parameters() if p.requires_grad]
    assert len(trainable) == 2


def test_zero_grad_both_modes():
    lin = nn.Linear(3, 2)
    lin(mini.randn(4, 3)).sum().backward()
    lin.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), np.zeros((2, 3)))
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


def test_apply_visits_children_first():
    net = Net(blocks=1)
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen[-1] == "Net" and seen[0] == "Linear"
    assert seen.count("Linear") == 3

    def init_zero(m):
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)
    net.apply(init_zero)
    assert float(net.fc.weight.abs().sum()) == 0.0


# --- hooks ---------------------------------------------------------------------------------------
def test_forward_hooks_fire_and_remove():
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    log = []
    h_pre = model[0].register_forward_pre_hook(lambda m, args: log.append(("pre", args[0].shape)))
    h_fwd = model[0].register_forward_hook(lambda m, args, out: log.append(("fwd", out.shape)))
    model(mini.randn(32, 10))
    assert log == [("pre", (32, 10)), ("fwd", (32, 20))]
    h_pre.remove()
    h_fwd.remove()
    model(mini.randn(32, 10))
    assert len(log) == 2
    h_fwd.remove()  # removing twice is harmless


def test_hooks_can_replace_input_and_output():
    lin = nn.Identity()
    with lin.register_forward_pre_hook(lambda m, args: args[0] * 2):
        with lin.register_forward_hook(lambda m, args, out: out + 1):
            y = lin(mini.ones(3))
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3])
    np.testing.assert_array_equal(lin(mini.ones(3)).numpy(), [1, 1, 1])  # removed on exit
    h = lin.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] * 5,), kwargs),
                                      with_kwargs=True)
    np.testing.assert_array_equal(lin(mini.ones(1)).numpy(), [5])
    h.remove()


def test_same_function_registered_twice_removes_exactly_one():
    lin = nn.Identity()
    calls = []

    def hook(m, args, out):
        calls.append(1)
    h1 = lin.register_forward_hook(hook)
    lin.register_forward_hook(hook)
    lin(mini.ones(1))
    h1.remove()
    lin(mini.ones(1))
    assert len(calls) == 3


def test_full_backward_hook_sees_gradients():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    seen = {}

    def hook(module, grad_input, grad_output):
        seen["in"], seen["out"] = grad_input, grad_output
    h = model[0].register_full_backward_hook(hook)
    x = mini.randn(5, 4, requires_grad=True)
    model(x).sum().backward()
    assert tuple(seen["out"][0].shape) == (5, 3)
    np.testing.assert_allclose(seen["in"][0].numpy(), x.grad.numpy(), rtol=1e-6)
    h.remove()
    seen.clear()
    model(mini.randn(5, 4)).sum().backward()
    assert seen == {}
    # inputs that need no gradient: the hook still fires, grad_input is (None,)
    h = model[0].register_full_backward_hook(hook)
    model(mini.randn(2, 4)).sum().backward()
    assert seen["in"] == (None,) and tuple(seen["out"][0].shape) == (2, 3)


def test_forward_not_implemented_message():
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing the required "forward"'):
        nn.Module()(mini.ones(1))


# --- state_dict / load_state_dict ------------------------------------------------------------------
def test_state_dict_is_detached_and_shares_memory():
    lin = nn.Linear(2, 2)
    sd = lin.state_dict()
    assert isinstance(sd, OrderedDict)
    assert not sd["weight"].requires_grad and not isinstance(sd["weight"], nn.Parameter)
    with mini.no_grad():
        lin.weight.fill_(3.0)
    assert float(sd["weight"].sum()) == 12.0
    assert lin.state_dict(keep_vars=True)["weight"] is lin.weight


def test_load_state_dict_fills_existing_module():
    mini.manual_seed(0)
    src, dst = Net(), Net()
    src.blocks[0].bn1.running_mean.fill_(7.0)
    w_before = dst.fc.weight
    version = dst.fc.weight._version
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert dst.fc.weight is w_before  # same Parameter object, filled in place
    assert dst.fc.weight._version > version
    assert dst.fc.weight.requires_grad and dst.fc.weight.grad_fn is None
    for (k, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    x = mini.randn(3, 3)
    np.testing.assert_allclose(src(x).detach().numpy(), dst(x).detach().numpy())
    # the copy is independent of the source
    with mini.no_grad():
        src.fc.weight.fill_(0.0)
    assert float(dst.fc.weight.abs().sum()) > 0


def test_load_state_dict_strict_lists_missing_and_unexpected():
    lin = nn.Linear(3, 2)
    sd = lin.state_dict()
    del sd["bias"]
    sd["extra.weight"] = mini.zeros(1)
    with pytest.raises(RuntimeError) as info:
        lin.load_state_dict(sd)
    msg = str(info.value)
    assert "Error(s) in loading state_dict for Linear" in msg
    assert 'Missing key(s) in state_dict: "bias"' in msg
    assert 'Unexpected key(s) in state_dict: "extra.weight"' in msg
    result = lin.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra.weight"]
    missing, unexpected = result
    assert missing == ["bias"]


def test_load_state_dict_shape_mismatch_names_key_and_shapes():
    lin = nn.Linear(3, 2)
    sd = nn.Linear(4, 2).state_dict()
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=r"size mismatch for weight: copying a param with "
                                               r"shape mini.Size\(\[2, 4\]\) from checkpoint, the "
                                               r"shape in current model is mini.Size\(\[2, 3\]\)"):
            lin.load_state_dict(sd, strict=strict)


def test_load_state_dict_nested_prefixes():
    net = Net()
    sd = net.state_dict()
    sd.pop("blocks.1.bn1.running_mean")
    sd["blocks.1.bn1.running_var"] = mini.zeros(4)
    res = net.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["blocks.1.bn1.running_mean"]
    assert res.unexpected_keys == ["blocks.1.bn1.running_var"]


def test_load_state_dict_casts_dtype():
    lin = nn.Linear(2, 1)
    sd = {k: v.double() for k, v in nn.Linear(2, 1).state_dict().items()}
    lin.load_state_dict(sd)
    assert lin.weight.dtype == mini.float32
    np.testing.assert_allclose(lin.weight.detach().numpy(), sd["weight"].numpy(), rtol=1e-6)


# --- to(), copies, repr ---------------------------------------------------------------------------
def test_to_dtype_keeps_parameter_objects():
    lin = nn.Linear(2, 2)
    lin.register_buffer("steps", mini.tensor([3]))
    w = lin.weight
    assert lin.to(mini.float64) is lin
    assert lin.weight is w and lin.weight.dtype == mini.float64 and lin.weight.requires_grad
    assert lin.steps.dtype == mini.int64  # integer buffers keep their dtype
    out = lin(mini.randn(3, 2, dtype=mini.float64))
    assert out.dtype == mini.float64
    lin.float()
    assert lin.bias.dtype == mini.float32
    with pytest.raises(TypeError, match="floating point"):
        lin.to(mini.int64)


def test_to_device():
    lin = nn.Linear(2, 2)
    try:
        lin.to("cpu")
    except (ImportError, RuntimeError) as e:  # no compiled cpu backend here
        pytest.skip(f"cpu backend unavailable: {e}")
    assert lin.weight.device == mini._get_backend("cpu")
    lin.to("numpy")
    assert lin.weight.device == mini._get_backend("numpy")


def test_deepcopy_and_pickle():
    net = Net()
    twin = copy.deepcopy(net)
    assert twin.fc.weight is not net.fc.weight
    assert isinstance(twin.fc.weight, nn.Parameter) and twin.fc.weight.requires_grad
    np.testing.assert_array_equal(twin.fc.weight.detach().numpy(), net.fc.weight.detach().numpy())
    with mini.no_grad():
        twin.fc.weight.fill_(0.0)
    assert float(net.fc.weight.abs().sum()) > 0
    again = pickle.loads(pickle.dumps(net))
    x = mini.randn(2, 3)
    np.testing.assert_allclose(again(x).detach().numpy(), net(x).detach().numpy())


def test_repr_matches_pytorch_layout():
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5, bias=False))
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=10, out_features=20, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=20, out_features=5, bias=False)\n"
        ")")
    net = nn.Module()
    net.body = nn.Sequential(nn.Flatten(), nn.GELU())
    net.blocks = nn.ModuleList([nn.Tanh(), nn.Tanh(), nn.Sigmoid()])
    assert repr(net) == (
        "Module(\n"
        "  (body): Sequential(\n"
        "    (0): Flatten(start_dim=1, end_dim=-1)\n"
        "    (1): GELU(approximate='none')\n"
        "  )\n"
        "  (blocks): ModuleList(\n"
        "    (0-1): 2 x Tanh()\n"
        "    (2): Sigmoid()\n"
        "  )\n"
        ")")


def test_repr_same_as_torch():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(inplace=True),
                               torch.nn.ModuleList([torch.nn.Linear(4, 4)] * 3),
                               torch.nn.Flatten(0), torch.nn.GELU("tanh"),
                               torch.nn.Softmax(dim=1), torch.nn.Identity())
    mnet = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True),
                         nn.ModuleList([nn.Linear(4, 4)] * 3),
                         nn.Flatten(0), nn.GELU("tanh"), nn.Softmax(dim=1), nn.Identity())
    assert repr(mnet) == repr(tnet)


def test_load_state_dict_assign_and_result_repr():
    lin = nn.Linear(2, 2)
    sd = nn.Linear(2, 2).state_dict()
    assert repr(lin.load_state_dict(sd)) == "<All keys matched successfully>"
    lin.load_state_dict(sd, assign=True)
    assert isinstance(lin.weight, nn.Parameter) and lin.weight.requires_grad
    with mini.no_grad():
        sd["weight"].fill_(2.0)
    assert float(lin.weight.sum()) == 8.0  # assign=True: the module now uses those tensors

"""A PyTorch training script for scikit-learn's 8x8 handwritten digits: a small CNN and an
MLP, written against PyTorch's API and nothing else.

``tests/nn/test_pytorch_script.py`` runs this one file twice: as it is, on PyTorch, and
with the three ``import torch`` lines below changed to ``import mini as torch`` (and
``mini.nn``, ``mini.nn.functional``), on mini.  Nothing else in it may change, so it uses
the calls a PyTorch user's script makes: modules and functional forms (conv, pooling,
dropout, normalisation, activations, losses), init, optimizers, a scheduler, a DataLoader,
train/eval and no_grad.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBlock(nn.Module):
    """conv -> batch norm -> relu, in functional form with hand-held parameters."""

    def __init__(self, cin, cout):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cout, cin, 3, 3))
        self.bias = nn.Parameter(torch.zeros(cout))
        nn.init.kaiming_normal_(self.weight, mode="fan_out", nonlinearity="relu")
        self.register_buffer("running_mean", torch.zeros(cout))
        self.register_buffer("running_var", torch.ones(cout))

    def forward(self, x):
        x = F.conv2d(x, self.weight, self.bias, stride=1, padding=1)
        x = F.batch_norm(x, self.running_mean, self.running_var, training=self.training,
                         momentum=0.1, eps=1e-5)
        return F.relu(x)


class DigitsCNN(nn.Module):
    def __init__(self, dropout=0.1):
        super().__init__()
        self.block1 = ConvBlock(1, 8)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16 * 2 * 2, 10)
        self.p = dropout

    def forward(self, x):
        x = F.max_pool2d(self.block1(x), kernel_size=2)         # 8 x 4 x 4
        x = F.leaky_relu(self.bn2(self.conv2(x)), 0.01)
        x = F.avg_pool2d(x, kernel_size=2)                      # 16 x 2 x 2
        x = torch.flatten(x, 1)
        x = F.dropout(x, p=self.p, training=self.training)
        return self.head(x)


class DigitsMLP(nn.Module):
    def __init__(self, hidden=32, dropout=0.1):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 10)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        x = F.gelu(self.norm(self.fc1(x)), approximate="tanh")
        x = self.drop(F.silu(self.fc2(x)))
        return F.log_softmax(self.out(x), dim=1)


def train(model, x, y, epochs=2, batch_size=64, lr=0.05, optimizer="sgd"):
    """Train on numpy arrays ``x``, ``y``; returns the loss of every step."""
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    losses = []
    model.train()
    for epoch in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            out = model(xb)
            if isinstance(model, DigitsMLP):          # log-probabilities
                loss = F.nll_loss(out, yb)
            else:
                loss = F.cross_entropy(out, yb, label_smoothing=0.05)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
    return losses


@torch.no_grad()
def evaluate(model, x, y):
    """(loss, accuracy) on numpy arrays, in eval mode."""
    model.eval()
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    logits = model(xs)
    loss = F.cross_entropy(logits, ys).item()
    accuracy = (logits.argmax(dim=1) == ys).float().mean().item()
    return loss, accuracy

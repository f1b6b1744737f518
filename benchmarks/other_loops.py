"""Training loops the per-op work was not tuned on (issue 29: "checked also with training loops you have not
seen"), timed as :mod:`benchmarks.training_loops` times its own: a CIFAR-style conv net with BatchNorm (SGD with
momentum and weight decay), PyTorch's word_language_model Transformer (nn.TransformerEncoder, dropout, Adam,
clipping) and pytorch/examples' VAE (Adam, a sampled latent)."""

from __future__ import annotations

import torch
from torch import nn


def _convnet(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 8 * 8, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x, y = torch.randn(32, 3, 32, 32).to(device), torch.randint(0, 10, (32,)).to(device)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


class TransformerLM(nn.Module):
    """word_language_model's TransformerModel at a small size: embedding 1000 x 128, 2 layers of 4 heads."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 128)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(128, 4, 256, dropout=0.2), 2,
                                             enable_nested_tensor=False)
        self.head = nn.Linear(128, 1000)

    def forward(self, src, mask):
        return self.head(self.encoder(self.embed(src) * 128 ** 0.5, mask))


def _transformer(device):
    torch.manual_seed(0)
    model = TransformerLM().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    src, tgt = (torch.randint(0, 1000, (35, 8)).to(device) for _ in range(2))
    mask = nn.Transformer.generate_square_subsequent_mask(35).to(device)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(src, mask).flatten(0, 1), tgt.flatten()).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return step


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20)
        self.fc3, self.fc4 = nn.Linear(20, 400), nn.Linear(400, 784)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(torch.relu(self.fc3(z)))), mu, logvar


def _vae(device):
    torch.manual_seed(0)
    model = VAE().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(128, 784).to(device)

    def step():
        opt.zero_grad()
        recon, mu, logvar = model(x)
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        (nn.functional.binary_cross_entropy(recon, x, reduction="sum") + kld).backward()
        opt.step()
    return step


LOOPS = {
    "convnet": ("CIFAR-style conv net + BatchNorm, SGD momentum + weight decay, batch 32", _convnet, 1.15),
    "transformer": ("word_language_model Transformer (dropout), Adam + clipping, 35 x 8 tokens", _transformer, 1.15),
    "vae": ("pytorch/examples VAE, Adam, batch 128", _vae, 1.15),
}

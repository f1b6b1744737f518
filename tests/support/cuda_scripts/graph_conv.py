"""A two-layer graph convolutional network trained the way GCN examples train one (no hybrid-interop in it):
row-normalised sparse COO features and a renormalised sparse adjacency moved to the device, torch.mm with the
sparse features, torch.spmm with the adjacency, dropout, Adam with weight decay, NLL loss on a node split; the
device from torch.accelerator. Without an accelerator it is its own CPU reference.

python graph_conv.py --out out.json
"""

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

NODES, FEATURES, CLASSES, HIDDEN = 60, 24, 4, 8


class GraphConv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(d_in, d_out))
        nn.init.xavier_uniform_(self.kernel)

    def forward(self, x, adj):
        return torch.spmm(adj, torch.mm(x, self.kernel))


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = GraphConv(FEATURES, HIDDEN), GraphConv(HIDDEN, CLASSES)

    def forward(self, x, adj):
        h = F.dropout(F.relu(self.first(x, adj)), 0.5, self.training)
        return F.log_softmax(self.second(h, adj), dim=1)


def graph():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, CLASSES, (NODES,), generator=g)
    features = (torch.rand(NODES, FEATURES, generator=g) < 0.2).float()
    features[torch.arange(NODES), labels * 3] = 1.0
    features = torch.diag(1 / features.sum(1)).to_sparse() @ features
    edges = torch.randint(0, NODES, (2, 3 * NODES), generator=g)
    adj = torch.eye(NODES) + torch.sparse_coo_tensor(edges, torch.ones(edges.shape[1]), (NODES, NODES))
    degree = torch.diag(adj.sum(1).to_dense().rsqrt()).to_sparse()
    return features.to_sparse(), (degree @ adj @ degree).to_sparse(), labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.manual_seed(42)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    features, adj, labels = (t.to(device) for t in graph())
    model = GCN().to(device)
    # Again once the weights are drawn: a device's dropout draws from the device's own generator (as CUDA's
    # does), which the weights drawn on the CPU did not move; seeded here, it starts where the CPU run's does.
    torch.manual_seed(42)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=5e-4)
    losses = []
    for _ in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        loss = F.nll_loss(model(features, adj)[: NODES // 2], labels[: NODES // 2])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        accuracy = (model(features, adj).argmax(1) == labels)[NODES // 2:].float().mean().item()
    with open(args.out, "w") as f:
        json.dump({"device": device.type, "layout": str(adj.layout), "adj_device": str(adj.device),
                   "losses": losses, "accuracy": accuracy}, f)


if __name__ == "__main__":
    main()

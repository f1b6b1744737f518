"""CUDA graphs the way PyTorch's documentation uses them (no hybrid-interop in it): warm-up on a side stream,
a whole training step (forward, backward, optimizer step) captured with torch.cuda.graph and replayed on new
data copied into static tensors; a forward-only graph; a module graphed by make_graphed_callables. Without
CUDA the same steps run eagerly on the CPU: its own reference.

python cuda_graphs.py --out out.json
"""

import argparse
import json

import torch
import torch.nn.functional as F

STEPS, BATCH = 4, 8


def data():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(BATCH, 16, generator=g), torch.randint(0, 4, (BATCH,), generator=g)) for _ in range(STEPS)]


def model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.0),
                               torch.nn.Linear(32, 4)).to(device)


def whole_step(device, graphs):
    net = model(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    batches = data()
    losses = []
    if not graphs:
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return net, losses
    static_x, static_y = batches[0][0].to(device).clone(), batches[0][1].to(device).clone()
    # The documented recipe warms up before capturing; its steps count, so the reference takes them too.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(static_x), static_y).backward()
        opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = F.cross_entropy(net(static_x), static_y)
        static_loss.backward()
        opt.step()
    for x, y in batches[1:]:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        losses.append(static_loss.item())
    return net, losses


def forward_only(device, graphs):
    net = model(device).eval()
    static_x = torch.zeros(BATCH, 16, device=device)
    outs = []
    if graphs:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = net(static_x).softmax(-1)
        assert torch.cuda.is_current_stream_capturing() is False
    for x, _ in data():
        if graphs:
            static_x.copy_(x)
            graph.replay()
            outs.append(static_out.sum(0).tolist())
        else:
            outs.append(net(x.to(device)).softmax(-1).sum(0).tolist())
    return outs


def graphed_callable(device, graphs):
    net = model(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    if graphs:
        net = torch.cuda.make_graphed_callables(net, (torch.randn(BATCH, 16, device=device, requires_grad=False),))
    losses = []
    for x, y in data():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    graphs = torch.cuda.is_available()
    device = "cuda" if graphs else "cpu"
    if graphs:
        net, losses = whole_step(device, True)
    else:
        # The reference of the captured recipe: one warm-up step on the first batch, then the others.
        net = model(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        batches = data()
        losses = []
        for i, (x, y) in enumerate(batches):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            if i:
                losses.append(loss.item())
    capture_error = None
    if graphs:
        try:
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                torch.ones(2, device=device).sum().item()
        except RuntimeError as error:
            capture_error = str(error)
    with open(args.out, "w") as f:
        json.dump({"device": device, "losses": losses, "weight": net[0].weight.detach().cpu().sum().item(),
                   "forward": forward_only(device, graphs), "graphed": graphed_callable(device, graphs),
                   "capture_error": capture_error}, f)


if __name__ == "__main__":
    main()

"""A recurrent language model trained the way word-level LSTM examples train one (no hybrid-interop in it):
embedding, a stacked nn.LSTM or nn.GRU with dropout between layers, a tied decoder, hidden state carried
across batches (detached), gradient clipping and a hand-written SGD update; the device from
torch.accelerator. An LSTMCell/GRUCell step runs too. Without an accelerator it is its own CPU reference.

python recurrent_lm.py --model LSTM --out out.json
"""

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, SEQ, BATCH = 50, 16, 8, 4


class RecurrentLM(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(VOCAB, DIM)
        self.rnn = getattr(nn, kind)(DIM, DIM, num_layers=2, dropout=0.2)
        self.decoder = nn.Linear(DIM, VOCAB)
        self.decoder.weight = self.encoder.weight

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        return F.log_softmax(self.decoder(self.drop(out)), dim=-1), hidden

    def init_hidden(self, device):
        h = torch.zeros(2, BATCH, DIM, device=device)
        return (h, h.clone()) if self.kind == "LSTM" else h


def detach(hidden):
    return tuple(h.detach() for h in hidden) if isinstance(hidden, tuple) else hidden.detach()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("LSTM", "GRU"), default="LSTM")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.manual_seed(1111)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    data = torch.randint(0, VOCAB, (SEQ * args.steps + 1, BATCH), generator=torch.Generator().manual_seed(0))
    data = data.to(device)
    model = RecurrentLM(args.model).to(device)
    # Again once the weights are drawn: a device's dropout draws from the device's own generator (as CUDA's
    # does), which the weights drawn on the CPU did not move; seeded here, it starts where the CPU run's does.
    torch.manual_seed(1111)
    hidden = model.init_hidden(device)
    losses = []
    model.train()
    for step in range(args.steps):
        x, y = data[step * SEQ:(step + 1) * SEQ], data[step * SEQ + 1:(step + 1) * SEQ + 1]
        hidden = detach(hidden)
        model.zero_grad()
        output, hidden = model(x, hidden)
        loss = F.nll_loss(output.view(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-2.0)
        losses.append(loss.item())
    torch.manual_seed(2222)  # the CPU run's dropout moved the CPU's generator, a device's did not
    cell = getattr(nn, args.model + "Cell")(DIM, DIM).to(device)
    hx = torch.randn(BATCH, DIM, generator=torch.Generator().manual_seed(1)).to(device)
    state = cell(model.encoder(data[0]), (hx, 0.5 * hx) if args.model == "LSTM" else hx)
    step_out = state[0] if isinstance(state, tuple) else state
    step_out.sum().backward()
    with open(args.out, "w") as f:
        json.dump({"device": str(device), "losses": losses, "cell": step_out.sum().item(),
                   "cell_grad": cell.weight_hh.grad.abs().sum().item()}, f)
    print(f"{args.model} on {device}: losses {' '.join(f'{v:.5f}' for v in losses)}")


if __name__ == "__main__":
    main()

"""HF transformers generate written for CUDA (device_map and .to("cuda")); its own CPU reference without CUDA.

A tiny GPT-2 built from a config with a fixed seed (no download); greedy decoding.
"""

import argparse
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--device-map", action="store_true", help="load through device_map='auto'")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).eval()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device_map and device == "cuda":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            model = GPT2LMHeadModel.from_pretrained(tmp, device_map="auto").eval()
    else:
        model = model.to(device)
    prompt = torch.tensor([[5, 17, 42, 8, 3]], device=device)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
        logits = model(prompt).logits
    with open(args.out, "w") as f:
        json.dump({"tokens": out[0].tolist(), "logits_sum": logits.double().cpu().sum().item(),
                   "device": str(next(model.parameters()).device), "is_cuda": next(model.parameters()).is_cuda}, f)


if __name__ == "__main__":
    main()

"""Scripts that fail the way CUDA scripts fail (no hybrid-interop in them): --api calls an API the rack cannot
serve (CUDA graphs), --op runs a matmul whose shapes do not fit, --python raises a plain Python error.

python crashes.py --op
"""

import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("api", "op", "python"))
    args = parser.parse_args()
    x = torch.ones(4, 3, device="cuda")
    if args.mode == "api":
        graph = torch.cuda.CUDAGraph()
        print(graph)
    elif args.mode == "op":
        print(x @ x)
    else:
        print({}["missing"])


if __name__ == "__main__":
    main()

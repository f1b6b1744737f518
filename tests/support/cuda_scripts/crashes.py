"""Scripts that fail the way CUDA scripts fail (no hybrid-interop in them): --api calls an API the rack cannot
serve (CUDA graphs), --op runs a matmul whose shapes do not fit, --python raises a plain Python error, --assert
fails an assert that has no message after an op's error was caught.

python crashes.py --op
"""

import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("api", "op", "python", "assert"))
    args = parser.parse_args()
    x = torch.ones(4, 3, device="cuda")
    if args.mode == "api":
        graph = torch.cuda.MemPool()
        print(graph)
    elif args.mode == "op":
        print(x @ x)
    elif args.mode == "python":
        print({}["missing"])
    else:
        try:
            print(x @ x)
        except RuntimeError:
            pass
        assert x.sum().item() == 0


if __name__ == "__main__":
    main()

"""A script whose exit status, stdout and traceback must come through `hybrid run` unchanged."""

import sys

print("stdout is the script's")
if sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if sys.argv[1] == "raise":
    raise ValueError("the script's own error")
if sys.argv[1] == "graph":
    import torch

    g = torch.cuda.MemPool()

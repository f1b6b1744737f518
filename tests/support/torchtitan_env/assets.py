"""The local assets torchtitan's llama3 debug recipe reads from its working directory: a byte-level BPE
tokenizer (``tests/assets/tokenizer``) and a small ``c4_test`` corpus (``tests/assets/c4_test``, JSON lines of
``{"text": ...}``). Both are made here, deterministically, from this repository's own documentation; torchtitan's
repository ships its own (not in the wheel), and any small corpus serves a test.

python -m tests.support.torchtitan_env.assets DIRECTORY
"""

from __future__ import annotations

import json
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
VOCAB = 1024
"""Under the debug model's 2048 embedding rows."""


def make(directory) -> pathlib.Path:
    """Write ``tests/assets/{tokenizer,c4_test}`` under ``directory``; return the assets folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    assets = pathlib.Path(directory) / "tests" / "assets"
    words = " ".join((ROOT / name).read_text() for name in ("README.md", "ARCHITECTURE.md")).split()
    rng = random.Random(0)
    documents = [" ".join(rng.choice(words) for _ in range(rng.randint(40, 400))) for _ in range(400)]
    (assets / "c4_test").mkdir(parents=True, exist_ok=True)
    with open(assets / "c4_test" / "data.json", "w", encoding="utf-8") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + "\n")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(documents, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    (assets / "tokenizer").mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(assets / "tokenizer" / "tokenizer.json"))
    with open(assets / "tokenizer" / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False}, f)
    return assets


if __name__ == "__main__":
    print(make(sys.argv[1] if len(sys.argv) > 1 else "."))

"""The local assets torchtitan's llama3 debug recipe reads from its working directory: a byte-level BPE
tokenizer (``tests/assets/tokenizer``) and a small ``c4_test`` corpus (``tests/assets/c4_test``, JSON lines of
``{"text": ...}``). Both are made here, deterministically, from a fixed grammar of a few sentences: a corpus
whose next token is predictable, so that four steps of the debug recipe lower the loss whatever the
repository's documents say (it was drawn from README.md once, and a README edit made a run not train).
torchtitan's repository ships its own assets (not in the wheel).

python -m tests.support.torchtitan_env.assets DIRECTORY
"""

from __future__ import annotations

import json
import pathlib
import random
import sys

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
VOCAB = 1024
"""Under the debug model's 2048 embedding rows."""
SUBJECTS = ("the rack", "a slot", "the planner", "each rank", "the timeline", "a kernel")
VERBS = ("runs", "places", "reduces", "gathers", "prices", "checks")
OBJECTS = ("the model.", "every op.", "its gradients.", "the batch.", "one layer.", "the step.")
SENTENCES = tuple(f"{s} {v} {o}" for s in SUBJECTS for v in VERBS for o in OBJECTS)


def make(directory) -> pathlib.Path:
    """Write ``tests/assets/{tokenizer,c4_test}`` under ``directory``; return the assets folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    assets = pathlib.Path(directory) / "tests" / "assets"
    rng = random.Random(0)
    documents = [" ".join(rng.choice(SENTENCES) for _ in range(rng.randint(4, 40))) for _ in range(400)]
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

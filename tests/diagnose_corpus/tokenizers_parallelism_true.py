"""TOKENIZERS_PARALLELISM=true, the pool used before a fork, and a batch encode in the child.

Source: https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/5328
Cause: setting TOKENIZERS_PARALLELISM explicitly keeps tokenizers' rayon thread pool on across the fork; the forked
    child inherits the pool's bookkeeping but none of its threads, so its first batch encode blocks forever.
Changed: an in-memory word-level tokenizer; one forked Process instead of datasets.map(num_proc=...).
Expect: tokenizers' Rust thread pool && TOKENIZERS_PARALLELISM
Timeout: 3
"""

import multiprocessing as mp
import os

os.environ["TOKENIZERS_PARALLELISM"] = "True"  # what the module did at import

from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

SENTENCES = ["the cat sat on the mat", "a dog ran in the park"] * 50


def build() -> Tokenizer:
    vocab = {"[UNK]": 0}
    for word in " ".join(SENTENCES).split():
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


tokenizer = build()


def encode() -> None:
    tokenizer.encode_batch(SENTENCES)


if __name__ == "__main__":
    encode()
    child = mp.get_context("fork").Process(target=encode)
    child.start()
    child.join()

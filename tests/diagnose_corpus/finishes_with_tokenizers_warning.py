"""Not a bug: tokenizers warns after a fork, and the script finishes.

Source: https://github.com/allenai/allennlp/issues/5128
Cause: none: the warning "The current process just got forked, after parallelism has already been used. Disabling
    parallelism to avoid deadlocks..." is tokenizers protecting the child; "it's safe to ignore" (the maintainers).
Changed: an in-memory word-level tokenizer instead of a pretrained one; a fork Pool instead of the data loader.
Expect: nothing
Timeout: 30
"""

import multiprocessing as mp

from tokenizers import Tokenizer, models, pre_tokenizers

SENTENCES = ["the cat sat on the mat", "a dog ran in the park"] * 50


def build() -> Tokenizer:
    vocab = {"[UNK]": 0}
    for word in " ".join(SENTENCES).split():
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


tokenizer = build()


def count(i: int) -> int:
    return sum(len(e.ids) for e in tokenizer.encode_batch(SENTENCES))


if __name__ == "__main__":
    tokenizer.encode_batch(SENTENCES)  # the pool is used before the fork
    with mp.get_context("fork").Pool(2) as pool:
        print(pool.map(count, range(4)))

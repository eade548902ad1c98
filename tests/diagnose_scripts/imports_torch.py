"""A script that needs torch: run by an interpreter without it, it dies at its first line."""

import torch

print(torch.ones(2).sum())

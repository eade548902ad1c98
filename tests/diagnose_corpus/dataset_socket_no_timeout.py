"""A DataLoader worker stuck in a network read inside the dataset.

Source: https://github.com/macrocosm-os/pretraining/pull/226
Cause: the dataset loader's requests set no timeout; a server that never answers leaves the worker blocked in the
    socket read, and the training loop waits for the batch forever.
Changed: a local socket that accepts connections and never answers (127.0.0.1, a free port) instead of the remote
    server; a raw socket read instead of requests.get.
Expect: stuck inside your dataset && your code: Remote.__getitem__ (dataset_socket_no_timeout.py
Timeout: torch 3.5
"""

import socket

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __init__(self, port: int) -> None:
        self.port = port

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        with socket.create_connection(("127.0.0.1", self.port)) as conn:
            conn.sendall(b"GET /shard HTTP/1.0\r\n\r\n")
            data = conn.recv(65536)  # no timeout: the server never answers
        return torch.tensor(len(data))


if __name__ == "__main__":
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)  # the kernel accepts the connection; nobody ever answers
    for batch in DataLoader(Remote(server.getsockname()[1]), batch_size=4, num_workers=1):
        print(batch)

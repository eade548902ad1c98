"""Not a multiprocessing bug: a shape error in the model, in the main process.

Source: https://androidkt.com/fix-runtimeerror-mat1-and-mat2-shapes-cannot-be-multiplied/
Cause: the flattened features (32 * 7 * 7 = 1568) do not match the Linear layer's in_features (1050); an ordinary
    exception of the script, nothing to do with processes.
Changed: random tensors instead of MNIST images, no torchsummary.
Expect: mat1 and mat2 shapes cannot be multiplied && the main process
Timeout: 60
"""

import torch
from torch import nn

model = nn.Sequential(
    nn.Conv2d(1, 16, 5, 1, 2),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 5, 1, 2),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(1050, 10),
)
print(model(torch.randn(2, 1, 28, 28)).shape)

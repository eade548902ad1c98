"""A process killed by SIGKILL, as the out-of-memory killer does: here the main process itself."""

import os
import signal

print("allocating", flush=True)
os.kill(os.getpid(), signal.SIGKILL)

"""A hang the course does not teach: the main process sleeps (an honest "unknown")."""

import time

time.sleep(1_800)

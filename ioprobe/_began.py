"""A clock read taken when this process first imports the watch's worker-side code: the first
import of ``loaders.torch_worker``, which times from here what importing it cost. A spawned
DataLoader worker pays that at its start (at every epoch's start without persistent
workers): the watch's own cost there, in the record."""

import time

NS = time.perf_counter_ns()

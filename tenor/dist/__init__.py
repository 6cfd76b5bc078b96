"""Model-server groups: one model sharded over several processes and hosts (tensor parallelism
on torch.distributed). See shard_plan (who holds what), group (the process group), messages
(the leader's step plan as tensors), leader, worker, local (--tensor-parallel N)."""

import os

# c10d logs every failed connect attempt with a C++ stack trace; tenor reports group failures
# itself in one line. Set before torch loads (tenor.dist is imported before torch on group paths).
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")

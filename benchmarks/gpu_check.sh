#!/usr/bin/env bash
# Model-server group checks for a machine with GPUs (none of the test suite needs one).
#
#   benchmarks/gpu_check.sh            # from the repository root
#
# 1. The group's collectives on NCCL: 2 ranks, one GPU each (needs >= 2 GPUs; NCCL refuses two
#    ranks on one GPU), a broadcast, an all-reduce and a gather checked against their CPU values.
# 2. The CPU parity tests (2-rank greedy == 1-process greedy) and the group benchmark, for the
#    record. The models themselves still run on the CPU: tenor's forward has no CUDA path yet
#    (see README, "Model-server groups"), so this checks the NCCL wiring, not GPU speed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

gpus=$(python3 -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
echo "GPUs: $gpus"
if [ "$gpus" -ge 2 ]; then
  port=$(python3 -c 'from tenor.dist.local import free_port; print(free_port())')
  for rank in 0 1; do
    python3 - "$rank" "$port" <<'PY' &
import sys, torch
from tenor.dist.group import Group
from tenor.dist.spec import GroupSpec
rank, port = int(sys.argv[1]), int(sys.argv[2])
g = Group(GroupSpec(2, rank, "127.0.0.1", port, device="cuda"))
b = g.broadcast(torch.tensor([41 + rank, 7]))
assert b.tolist() == [41, 7], b
s = g.all_reduce(torch.full((4,), float(rank + 1)))
assert s.tolist() == [3.0] * 4, s
parts = g.gather_to_leader(torch.full((2,), float(rank)))
assert rank != 0 or [p.tolist() for p in parts] == [[0.0, 0.0], [1.0, 1.0]], parts
g.close()
print(f"rank {rank}: NCCL broadcast, all-reduce and gather OK")
PY
  done
  wait
else
  echo "skip: the NCCL check needs 2 GPUs (found $gpus)"
fi
python3 -m pytest -q -p no:cacheprovider tests/dist
python3 benchmarks/group.py --out "benchmarks/results/group-gpu-machine-$(date +%Y-%m-%d).json"

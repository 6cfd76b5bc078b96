#!/usr/bin/env bash
# The CUDA path's checks, for a machine with a GPU (none of the test suite needs one).
#
#   benchmarks/gpu_check.sh            # from the repository root; results in benchmarks/results/
#
# 1. The model on one GPU: accuracy of float32 and bf16 on cuda against HF transformers float32
#    (teacher-forced top-1, greedy 32 tokens on 10 prompts), and single-stream decode against HF
#    on the same GPU.
# 2. Served on cuda: `tenor serve --device cuda` under 32 concurrent streams (`tenor bench`).
# 3. With >= 2 GPUs, groups on NCCL: the collectives checked against their CPU values, then
#    `tenor generate --tensor-parallel 2 --device cuda` against one GPU's greedy tokens.
# 4. The group tests on the CPU (gloo), for the record.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
day=$(date +%Y-%m-%d)
mkdir -p benchmarks/results
python3 -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"; print(torch.cuda.get_device_name())'

python3 benchmarks/accuracy.py --device cuda --precisions float32/none,bfloat16/none \
  --json-out "benchmarks/results/accuracy-cuda-$day.json"
python3 benchmarks/decode.py --device cuda --precisions float32/none,bfloat16/none \
  --json-out "benchmarks/results/decode-cuda-$day.json"

port=$(python3 -c 'from tenor.dist.local import free_port; print(free_port())')
python3 -m tenor.cli.main serve --device cuda --port "$port" > /tmp/tenor-gpu-serve.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/healthcheck" > /dev/null && break
  sleep 1
done
head -3 /tmp/tenor-gpu-serve.log
python3 -m tenor.cli.main bench --base-url "http://127.0.0.1:$port" --concurrency 32 --num-prompts 64 \
  --max-tokens 128 --ignore-eos --no-progress --json-out "benchmarks/results/serve-cuda-$day.json"
kill "$server"; wait "$server" || true
trap - EXIT

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
  one=$(python3 -m tenor.cli.main generate --device cuda --dtype float32 --quantize none --json \
    --max-tokens 32 "The capital of France is")
  two=$(python3 -m tenor.cli.main generate --device cuda --dtype float32 --quantize none --json \
    --max-tokens 32 --tensor-parallel 2 "The capital of France is")
  python3 - "$one" "$two" <<'PY'
import json, sys
one, two = (json.loads(a)["token_ids"] for a in sys.argv[1:])
print("2 GPUs (NCCL) greedy == 1 GPU greedy:", one == two)
assert one == two, (one, two)
PY
else
  echo "skip: the NCCL checks need 2 GPUs (found $gpus)"
fi
python3 -m pytest -q -p no:cacheprovider tests/dist
python3 benchmarks/group.py --out "benchmarks/results/group-gpu-machine-$(date +%Y-%m-%d).json"

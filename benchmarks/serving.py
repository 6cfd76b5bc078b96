"""Serving benchmark for any OpenAI-compatible server; the same code as `tenor bench`.

    python benchmarks/serving.py --base-url http://127.0.0.1:8000 --concurrency 32 \
        --num-prompts 64 --max-tokens 128 --json-out results.json
"""

import sys

from tenor.bench.serving import main

if __name__ == "__main__":
    sys.exit(main())

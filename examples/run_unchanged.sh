#!/usr/bin/env bash
# `ioprobe run` on a training script that doesn't know ioprobe exists: every DataLoader it
# iterates is watched, its output and exit code pass through, and the verdict follows.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=. .venv/bin/ioprobe run --json unchanged_run.json -- .venv/bin/python -m tests.fixtures.train_script
echo "record: unchanged_run.json"

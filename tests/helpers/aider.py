"""aider for tests: where it is installed, and the scripted model it talks to."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.agentmodels import clis

MODEL = "openai/scripted"  # litellm's OpenAI provider at --openai-api-base; the server sees "scripted"


def find_aider() -> str | None:
    """$ASSAY_AIDER_BIN, else the venv tests/install-agents.sh makes."""
    for candidate in (os.environ.get("ASSAY_AIDER_BIN"), str(clis.AIDER_BIN / "aider")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


AIDER = find_aider()  # read at import: the test fixtures drop every ASSAY_* variable before a test runs


def model_metadata(path: Path) -> Path:
    """Context size and costs of the scripted model, so aider does not download litellm's price list for it."""
    path.write_text(json.dumps({MODEL: {
        "max_input_tokens": 128000, "max_output_tokens": 8192, "max_tokens": 8192,
        "input_cost_per_token": 0, "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}}))
    return path

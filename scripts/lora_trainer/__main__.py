"""Command line: `python3 scripts/lora_trainer [flags]` or `python3 -m lora_trainer` from scripts/.

    python3 scripts/lora_trainer --backend tiny --port 8400
    python3 scripts/lora_trainer --backend hf --base-model Qwen/Qwen2.5-1.5B-Instruct --port 8400
"""

import os
import sys

if __package__ in (None, ""):
    # Run as a directory (python3 scripts/lora_trainer): make the package importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from lora_trainer.cli import main  # noqa: E402
else:
    from .cli import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m lora_trainer [flags]`, with the project's virtual environment
(scripts/ci/setup-python.sh installs the package there; scripts/ci/python-env.sh
prints its interpreter):

    "$(scripts/ci/python-env.sh)" -m lora_trainer --backend tiny --port 8400
    "$(scripts/ci/python-env.sh)" -m lora_trainer --backend hf --base-model /path/to/model --port 8400
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())

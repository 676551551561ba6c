import os
import sys
from pathlib import Path

# Tests import helpers (probe environments) from this folder.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("RLAX_TRPO_SMALL", "1")

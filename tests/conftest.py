import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `fixtures` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))

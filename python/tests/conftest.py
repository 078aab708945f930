"""pytest setup: tests import the tessera package next to them (python/tessera), whatever else is on sys.path."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

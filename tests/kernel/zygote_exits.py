"""A module that ends the process importing it (exit code 7): tests/kernel/test_zygote.py preloads it."""

import os
import sys

sys.stderr.write("zygote_exits: simulated broken import\n")
sys.stderr.flush()
os._exit(7)

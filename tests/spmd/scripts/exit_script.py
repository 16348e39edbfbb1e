"""Rank ``argv[1]`` calls ``sys.exit(int(argv[2]))``; the others return normally."""

import os
import sys

if os.environ["RANK"] == sys.argv[1]:
    sys.exit(int(sys.argv[2]))
print(f"rank {os.environ['RANK']} finished")

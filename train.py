#!/usr/bin/env python
"""Train policy-optimisation agents: `python train.py [--config NAME] [--seeds N] [key=value]`.

The same command line as the installed `rlax-trpo` (`rlax_trpo/cli/`), for a checkout:
`python train.py ...` = `rlax-trpo train ...`, `python train.py eval ...` = `rlax-trpo eval
...`. With no arguments it trains PPO on CartPole-v1, about a minute on a 2-core CPU.
"""

import sys

from rlax_trpo.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="train.py"))

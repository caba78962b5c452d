"""`python -m grader ...`: the command line lives in grader.run.cli (see its docstring)."""
import sys

from grader.run.cli import main

sys.exit(main())

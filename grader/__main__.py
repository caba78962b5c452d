"""`python -m grader ...`: the command line lives in grader.cli (see its docstring)."""
import sys

from grader.cli import main

sys.exit(main())

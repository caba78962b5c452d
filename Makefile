# make grade                  scorecard for starter/ (IMPL=solutions, or SUBMISSION=path/to/tree)
# make exercise-02            grade one exercise, every failure in full (PROFILE=1: ncu per kernel;
#                             SANITIZE=memcheck|racecheck|...,
#                             REPRO=check@example: one failing example again, as a failure prints it;
#                             QUICK=1: the forward's checks, one example per property check, none of
#                             the backward's other checks, no opcheck nor torch.compile,
#                             the baselines' kept figures, two validated timed calls;
#                             TIMES=1: where the seconds went)
# make watch-02               regrade one exercise on every save, with the seconds it took (QUICK=1:
#                             QUICK's examples and the timing)
# make bench                  solutions/ vs baselines into docs/performance.md (needs a GPU;
#                             EXERCISE=04,05: those only, the other rows kept; REPEATS=5)
# make test                   the project's own tests
# make stop                   end the grader's processes kept ready between commands (WARM)
# BUILD=aot                   (with grade/exercise-NN) ahead-of-time builds of the CUDA tracks
# WARM=900                    (with grade/exercise-NN) the grader's
#                             processes kept ready that many seconds for the next command (0: not
#                             kept); make stop ends them
SHELL := /bin/bash
IMPL ?= starter
SUBMISSION ?=
BUILD ?=
WARM ?= 900
RESULTS ?= results.json
BENCH_OUT ?= docs
VENV := .venv
# make test: pytest-xdist workers where it is installed (auto: one per core); an idle worker
# takes tests queued for a busy one (worksteal): the suite's longest tests build 03 for 40-90 s
TEST_JOBS ?= auto

# Use a python3 that already has everything (the GPU machines: no network, nothing to
# install); otherwise make .venv from requirements.txt once. Found without importing them
# (importing torch here cost every make command a second torch import, 2-4 s on a GPU host);
# torch/version.py says whether it is a CUDA build.
NEEDS := import importlib.util as u, os; assert all(u.find_spec(m) for m in ('torch', 'triton', 'numpy', 'pytest', 'hypothesis', 'pytest_timeout', 'rich')); v = {}; exec(open(os.path.join(u.find_spec('torch').submodule_search_locations[0], 'version.py')).read(), v); assert v['cuda']
ifeq ($(shell python3 -c "$(NEEDS)" >/dev/null 2>&1 && echo yes),yes)
  PY := python3
  SETUP :=
else
  PY := $(VENV)/bin/python
  SETUP := $(VENV)/.installed
  export PATH := $(abspath $(VENV))/bin:$(PATH)
endif
BENCH_IMPL := $(if $(filter command line,$(origin IMPL)),$(IMPL),solutions)
TREE := $(if $(SUBMISSION),--submission $(SUBMISSION),--impl $(IMPL))
BUILD_FLAG := $(if $(BUILD),--build $(BUILD))
WARM_FLAG := --keep $(WARM)

.PHONY: grade bench test list clean help stop
help:
	@sed '/^[^#]/,$$d' Makefile | sed 's/^# //'

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

grade: $(SETUP)
	$(PY) -m grader grade $(TREE) $(BUILD_FLAG) $(WARM_FLAG) $(if $(QUICK),--quick) $(if $(TIMES),--time-report) --json $(RESULTS)

# PROFILE=1 runs the profiler instead of the grade (one command echoed, not both)
exercise-%: $(SETUP)
ifneq ($(PROFILE),)
	$(PY) -m grader.tools.profile --exercise $* $(TREE)
else
	$(PY) -m grader grade --exercise $* $(TREE) $(BUILD_FLAG) $(WARM_FLAG) $(if $(QUICK),--quick) $(if $(TIMES),--time-report) $(if $(SANITIZE),--sanitize $(SANITIZE)) $(if $(REPRO),--repro '$(REPRO)')
endif

watch-%: $(SETUP)
	$(PY) -m grader watch --exercise $* $(TREE) $(if $(QUICK),--quick)

bench: $(SETUP)
	$(PY) -m grader bench $(if $(SUBMISSION),--submission $(SUBMISSION),--impl $(BENCH_IMPL)) --out $(BENCH_OUT) $(if $(EXERCISE),--exercise $(EXERCISE)) $(if $(REPEATS),--repeats $(REPEATS))

# Workers side by side only with Landlock: without it a grade snapshots and restores the whole
# repository, and a tampering test's write would race the other worker's reads (tests/conftest.py)
test: $(SETUP)
	$(PY) -m pytest tests $$($(PY) -c "import xdist; from grader.common.machine import landlock_available as l; assert l()" 2>/dev/null && echo "-n $(TEST_JOBS) --dist worksteal")

list: $(SETUP)
	@$(PY) -m grader list

stop: $(SETUP)
	@$(PY) -m grader.run.keeper --stop

clean: stop
	rm -rf .cache .hypothesis results.json

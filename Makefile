# Set-up commands for a fresh machine: `make demo`, `make test` and `make python`.
# All install missing Debian packages, configure with CMake, build and run; `make test` and
# `make python` also create the project's Python environment .venv (PyTorch from PyPI).
BUILD ?= build
BUILD_TYPE ?= Release
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ifneq ($(CI),)
CMAKE_FLAGS += -DTWELL_WERROR=ON
endif
VENV ?= .venv
CMAKE_FLAGS += -DTWELL_PYTHON=$(abspath $(VENV))/bin/python
ifneq ($(TWELL_DEPS_PREFIX),)
CMAKE_FLAGS += -DTWELL_DEPS_PREFIX=$(TWELL_DEPS_PREFIX)
endif

.PHONY: all deps configure build test demo install asan fuzz format-check clean venv python \
    abi-check abi-update

all: build

deps:
	@sh scripts/deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The Python package's tests (test_python, test_python_gpu) run in the project's .venv.
test: venv build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

venv:
	@sh scripts/venv.sh $(VENV)

# The PyTorch package: installs twellrt (with this build's libtwellrt, its Lua runtime and the
# templates inside it) into .venv. `pip install ./python` builds the library itself instead.
python: venv build
	TWELL_PREBUILT_LIB=$(abspath $(BUILD))/libtwellrt.so $(VENV)/bin/python -m pip install -q \
	    --no-deps --no-build-isolation --force-reinstall ./python
	@$(VENV)/bin/python -c "import twellrt; print('twellrt', twellrt.version(), 'installed in $(VENV):', twellrt.library_path())"

demo: build
	$(BUILD)/twell demo $(DEMO_ARGS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Debug build with AddressSanitizer and UBSan (protect_shadow_gap=0 lets CUDA map its memory).
asan:
	$(MAKE) test BUILD=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="$(CMAKE_FLAGS) -DTWELL_SANITIZE=ON" \
	    ASAN_OPTIONS=protect_shadow_gap=0

# The exported ABI against the baseline abi/libtwellrt.abi (scripts/check_abi.sh, README "ABI");
# abi-update rewrites the baseline after a soname bump or to record added functions.
abi-check:
	@sh scripts/check_abi.sh

abi-update:
	@sh scripts/check_abi.sh --update

# libFuzzer harnesses of the fuzz targets (clang; tests/fuzz/tw_fuzz.h): build-fuzz/fuzz_<target>.
FUZZ_TARGETS = render cache_entry tune_record model_config packed
fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DTWELL_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) $(addprefix --target fuzz_,$(FUZZ_TARGETS))

format-check:
	@files=$$(git ls-files '*.c' '*.h'); clang-format --dry-run --Werror $$files

clean:
	rm -rf $(BUILD) build-asan build-abi build-fuzz

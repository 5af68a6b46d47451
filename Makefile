# Two set-up commands for a fresh machine: `make demo` and `make test`.
# Both install missing Debian packages, configure with CMake, build and run.
BUILD ?= build
BUILD_TYPE ?= Release
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ifneq ($(CI),)
CMAKE_FLAGS += -DTWELL_WERROR=ON
endif
ifneq ($(TWELL_DEPS_PREFIX),)
CMAKE_FLAGS += -DTWELL_DEPS_PREFIX=$(TWELL_DEPS_PREFIX)
endif

.PHONY: all deps configure build test demo install asan format-check clean

all: build

deps:
	@sh scripts/deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

demo: build
	$(BUILD)/twell demo $(DEMO_ARGS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Debug build with AddressSanitizer and UBSan (protect_shadow_gap=0 lets CUDA map its memory).
asan:
	$(MAKE) test BUILD=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="$(CMAKE_FLAGS) -DTWELL_SANITIZE=ON" \
	    ASAN_OPTIONS=protect_shadow_gap=0

format-check:
	@files=$$(git ls-files '*.c' '*.h'); clang-format --dry-run --Werror $$files

clean:
	rm -rf $(BUILD) build-asan

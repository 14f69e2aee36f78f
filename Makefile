# sluice - the two README commands and the developer targets.
#
#   make demo    the main job: real Fashion-MNIST through a sluice pipeline
#   make test    every test (CTest)
#
# Both install the dependencies with apt-get first (skipped when every package
# is already installed), configure with CMake and build.  `make help` lists
# the other targets.

# Every Debian package the project needs, for the current and the upcoming
# layers (Lua binding, SLR format, the demo's data), so the README commands
# never change.
PACKAGES := build-essential cmake pkg-config libzstd-dev zlib1g-dev \
            luajit libluajit-5.1-dev lua-busted lua-check libdlpack-dev \
            dataset-fashion-mnist openmpi-bin libopenmpi-dev zstd \
            libturbojpeg0-dev libspng-dev libjpeg-turbo-progs \
            clang-14 libclang-rt-14-dev \
            python3-numpy libprotobuf-c-dev protobuf-c-compiler \
            libcurl4-openssl-dev nginx

BUILD_TYPE ?= RelWithDebInfo
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_FUZZ ?= build-fuzz
BUILD_C_ONLY ?= build-c-only
FUZZ_CC    ?= clang-14
# Seconds each fuzz target runs in `make fuzz` (CI: 60).
FUZZ_SECONDS ?= 60
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
DATA       ?= /usr/share/datasets/fashion-mnist
EPOCHS     ?= 3

# The Python binding (bindings/python/) and its pytest suite: headers, the
# system interpreter's numpy and pytest, and venv for the wheel test.
PACKAGES += python3-dev python3-numpy python3-pytest python3-venv

# sudo only when not root and sudo exists.
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || ! command -v sudo >/dev/null 2>&1 \
                || echo sudo)
APT  := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

FORMAT_DIRS := src include tests bench examples tools

# Keep the nested make run by `cmake --build` from printing directory noise.
MAKEFLAGS += --no-print-directory

.PHONY: help deps configure build test ray-test demo asan tsan c-only fuzz fuzz-build bench bench-peers format clean

help:
	@echo "sluice make targets:"
	@echo "  make demo    install deps, build, run the Fashion-MNIST demo (the main job)"
	@echo "  make test    install deps, build, run every test with CTest"
	@echo "  make ray-test  make the Ray venv (setup_ray), run python.ray (2-node local cluster)"
	@echo "  make build   configure and build into $(BUILD)/ ($(BUILD_TYPE))"
	@echo "  make asan    AddressSanitizer + UBSan build in $(BUILD_ASAN)/, run CTest"
	@echo "  make tsan    ThreadSanitizer build in $(BUILD_TSAN)/, run the threaded suites"
	@echo "  make c-only  C-only build (no LuaJIT, TurboJPEG, libspng) in $(BUILD_C_ONLY)/, run CTest"
	@echo "  make fuzz    libFuzzer build in $(BUILD_FUZZ)/ ($(FUZZ_CC)), each target FUZZ_SECONDS=$(FUZZ_SECONDS) s"
	@echo "  make bench   build and run every benchmark (bench/run; peers if set up)"
	@echo "  make bench-peers  set up the peers' venv, then sluice vs its peers"
	@echo "  make format  clang-format -i over $(FORMAT_DIRS)"
	@echo "  make clean   remove $(BUILD)/ $(BUILD_ASAN)/ $(BUILD_TSAN)/ $(BUILD_FUZZ)/ $(BUILD_C_ONLY)/"
	@echo "  make deps    only install the apt packages"
	@echo "variables: EPOCHS=$(EPOCHS) DATA=$(DATA) JOBS=$(JOBS)"

# Installs the packages unless dpkg already reports all of them installed,
# so a developer's rerun costs one dpkg-query.
deps:
	@missing=""; \
	for p in $(PACKAGES); do \
	  st=$$(dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null || true); \
	  case "$$st" in *"ok installed"*) ;; *) missing="$$missing $$p";; esac; \
	done; \
	if [ -z "$$missing" ]; then \
	  echo "deps: all packages already installed"; \
	else \
	  echo "deps: installing$$missing"; \
	  $(APT) update && \
	  $(APT) install -y --no-install-recommends $(PACKAGES); \
	fi

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# sluice.ray on a two-node local Ray cluster (bindings/python/tests/
# test_ray.py): Ray from PyPI into a cached venv outside the tree
# (~/.cache/sluice/ray-venv, setup_ray), then the CTest test python.ray,
# which fails rather than skips here when Ray is missing.
ray-test: build
	bindings/python/tests/setup_ray
	SLUICE_REQUIRE_RAY=1 ctest --test-dir $(BUILD) --output-on-failure \
	  --no-tests=error -R '^python\.ray$$'

# The main job: examples/trainer/trainer (C) fed by examples/fashion_mnist.lua
# through the embedding API, on Fashion-MNIST packed into $(BUILD)/data/ by
# the built CLI when missing.  No LUA_PATH: the build tree's libsluice
# finds its own Lua modules (src/script/lua_path.c, docs/EMBEDDING.md).
demo: build
	@mkdir -p $(BUILD)/data
	@for s in train t10k; do \
	  [ -s $(BUILD)/data/$$s.slr ] && continue; \
	  echo "demo: packing $$s into $(BUILD)/data/$$s.slr"; \
	  $(BUILD)/tools/sluice pack idx -q $(DATA)/$$s-images-idx3-ubyte.gz \
	    $(DATA)/$$s-labels-idx1-ubyte.gz -o $(BUILD)/data/$$s.slr || exit 1; \
	done
	$(BUILD)/examples/trainer/trainer --data $(BUILD)/data --epochs $(EPOCHS)

asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DSLUICE_ASAN=ON -DSLUICE_UBSAN=ON
	cmake --build $(BUILD_ASAN) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j$(JOBS)

# TSan runs the suites that start threads; the rest gain nothing from it.
tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DSLUICE_TSAN=ON
	cmake --build $(BUILD_TSAN) -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --test-dir $(BUILD_TSAN) --output-on-failure -j$(JOBS) \
	  --no-tests=error -R '^(channel|prefetch|threaded|double_buffer|errors|lua_ship|lua_stage|open_files|registry|plan|pipeline|stats|image|faults|lua_faults|shutdown|buffer_pool|engine|parallel|threads|wds|http|http_stream|s3|autotune|ignore_errors|interleave|lua_flow|samplers|shard|reshape|engine_stage|gather|source_shapes|cpus|fused|threads_auto|budget|budget_io|budget_stages)\.'

# The C-only library: -DSLUICE_WITH_LUA=OFF -DSLUICE_WITH_IMAGES=OFF leave
# out src/script/ and src/image/ and their libraries; the suites that need
# them are not built, cli.without_layers checks the answers that replace
# them.  A target of its own rather than a CTest test of every build: a
# second full build inside each `make test`, `asan` and `tsan` would cost
# each of them a build and its tests again (`make c-only`: about 45 s on 2
# CPUs).
c-only: deps
	cmake -S . -B $(BUILD_C_ONLY) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DSLUICE_WITH_LUA=OFF -DSLUICE_WITH_IMAGES=OFF
	cmake --build $(BUILD_C_ONLY) -j$(JOBS)
	ctest --test-dir $(BUILD_C_ONLY) --output-on-failure -j$(JOBS)

# The fuzz targets (fuzz/fuzz_*.c) as libFuzzer binaries: clang, everything
# instrumented with ASan+UBSan (SLUICE_FUZZ).  `make fuzz` then runs each for
# FUZZ_SECONDS from the committed corpus (fuzz/run.sh); a crash, leak,
# sanitizer report or hang fails it, the input saved under
# $(BUILD_FUZZ)/fuzz-work/artifacts/.  The corpus itself is replayed without
# libFuzzer by `make test` (CTest fuzz.<name>).
fuzz-build: deps
	cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCMAKE_C_COMPILER=$(FUZZ_CC) -DSLUICE_FUZZ=ON \
	  -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF \
	  -DSLUICE_BUILD_EXAMPLES=OFF
	cmake --build $(BUILD_FUZZ) -j$(JOBS) --target fuzz_all

fuzz: fuzz-build
	fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

# Every benchmark, its limits and (when bench/peers/setup has made their
# venv) the peers, into $(BUILD)/bench/results.jsonl; docs/PERFORMANCE.md.
bench: build
	python3 bench/run --build $(BUILD)

# The Fashion-MNIST epoch against PyTorch, tf.data, Paddle and Grain: makes
# their venv (CPU builds from PyPI, outside the tree) first.
bench-peers: build
	bench/peers/setup
	python3 bench/peers/run --build $(BUILD)

format:
	@command -v clang-format >/dev/null 2>&1 || \
	  { echo "format: clang-format not found (apt-get install clang-format)"; exit 1; }
	find $(FORMAT_DIRS) -name '*.[ch]' -print0 2>/dev/null | \
	  xargs -0 -r clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_FUZZ) $(BUILD_C_ONLY)

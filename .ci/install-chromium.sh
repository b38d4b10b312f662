#!/usr/bin/env bash
# Install Debian's headless-capable Chromium (package `chromium`) when it is not on PATH.
# Used by tests/test_html_chromium.py (the self-contained HTML report opened offline).
# Idempotent; needs root (or sudo).
set -euo pipefail

for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then
        echo "install-chromium: $b already on PATH: $(command -v "$b")"
        "$b" --version 2>/dev/null || true
        exit 0
    fi
done

SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-chromium: need root (or sudo) to install chromium" >&2; exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# fonts so that chart text renders in screenshots; chromium pulls its own libraries
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core

if ! command -v chromium >/dev/null 2>&1; then
    echo "install-chromium: chromium installed but not on PATH" >&2
    exit 1
fi
echo "install-chromium: $(command -v chromium)"
chromium --version 2>/dev/null || true

#!/usr/bin/env bash
# Install Nsight Systems (the `nsys` CLI) from Debian's non-free archive when it is not on PATH.
# Debian bookworm ships nsight-systems 2022.4: enough to export reports written by 2022.4 or
# older; newer reports are refused by it (traceview says so). Idempotent; needs root.
set -euo pipefail

if command -v nsys >/dev/null 2>&1; then
    echo "install-nsys: nsys already on PATH: $(command -v nsys)"
    nsys --version
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-nsys: need root (or sudo) to install nsight-systems" >&2; exit 1
    fi
fi

# Enable the non-free component (nsight-systems) and contrib (glx-alternative-nvidia, needed by
# libcuda1, which nsight-systems-target depends on) in every Debian source: deb822 *.sources
# ("Components: main" lines) and one-line *.list files ("deb URI suite main").
add_component() {  # file, line-selector regex, component
    local f="$1" sel="$2" comp="$3"
    if grep -E "$sel" "$f" | grep -qvE "[[:space:]]$comp([[:space:]]|\$)"; then
        $SUDO sed -i -E "/$sel/{/[[:space:]]$comp([[:space:]]|\$)/!s/\$/ $comp/}" "$f"
        echo "install-nsys: enabled $comp in $f"
    fi
}
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do
    grep -qE '^URIs:.*debian' "$f" || continue
    for comp in non-free contrib; do add_component "$f" '^Components:' "$comp"; done
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    for comp in non-free contrib; do add_component "$f" '^deb .*debian' "$comp"; done
done

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends nsight-systems

if ! command -v nsys >/dev/null 2>&1; then
    # the package may keep the binary under /usr/lib/nsight-systems/...; link it onto PATH
    cand=$(find /usr/lib/nsight-systems /usr/lib/x86_64-linux-gnu/nsight-systems /opt/nvidia \
        -type f -name nsys -perm -u+x 2>/dev/null | head -n 1 || true)
    if [ -n "$cand" ]; then
        $SUDO ln -sf "$cand" /usr/local/bin/nsys
        echo "install-nsys: linked $cand -> /usr/local/bin/nsys"
    fi
fi

if ! command -v nsys >/dev/null 2>&1; then
    echo "install-nsys: nsight-systems installed but no nsys binary found" >&2
    exit 1
fi
echo "install-nsys: $(command -v nsys)"
nsys --version

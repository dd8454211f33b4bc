#!/usr/bin/env bash
# Set up vnetbench on a fresh Debian 12 machine (as root), then run the demo or the tests.
#   ./install.sh demo   install what is missing, run a small real experiment, print its summary
#   ./install.sh test   install what is missing, run the test suite
#   ./install.sh        install only
set -euo pipefail
cd "$(dirname "$0")"
what="${1:-install}"
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root (vnetbench creates network namespaces)" >&2; exit 1; }

# strongSwan's AES-GCM (the default IPsec cipher) and OpenSSL plugins are in libstrongswan-standard-plugins, a
# recommendation that --no-install-recommends skips: name it.
PACKAGES=(iproute2 iputils-ping procps iperf3 sockperf netperf sysstat ethtool tcpdump
          openvswitch-switch strongswan-charon strongswan-swanctl libcharon-extra-plugins
          libstrongswan-standard-plugins libstrongswan-extra-plugins wireguard-go wireguard-tools nginx stress-ng
          python3 python3-venv openssh-client openssh-server user-mode-linux ansible-core linux-perf
          netsniff-ng
          qemu-system-x86 busybox-static lz4)
# (qemu guests: qemu with its virtiofsd and qboot; busybox-static is their initramfs's one program; lz4 unpacks the
# guest kernel for a faster boot.)
# Only for `./install.sh test`: the report test renders the HTML report in headless Chromium.
TEST_PACKAGES=(chromium fonts-dejavu-core)
if [ "$what" = test ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # netperf lives in Debian's non-free component.
  # (`non-free-firmware`, listed by default on Debian 12, is another component: match the whole word.)
  if ! grep -rqsE '(^|[[:space:]])non-free([[:space:]]|$)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat > /etc/apt/sources.list.d/vnetbench-non-free.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  echo "install.sh: installing ${missing[*]}"
  apt-get update -qq
  # vnetbench starts its own private daemons: keep the packages from starting system-wide ones.
  # (Only if the machine has no policy of its own, and only that file is removed again.)
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=$(command -v python3.11 || command -v python3)
if [ ! -x .venv/bin/vnetbench ] || ! .venv/bin/python -c "import vnetbench, xdist, pyarrow, pyroute2, MLRsearch, jumpavg" 2>/dev/null; then
  "$PY" -m venv .venv
  # uv installs the same pinned packages in about half pip's time (31 s against 48 s here); pip if uv cannot.
  { .venv/bin/pip install -q --disable-pip-version-check uv==0.13.9 &&
    .venv/bin/uv pip install -q --python .venv/bin/python ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} -e '.[test]'; } ||
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
fi
# The libraries compiled once here: where PYTHONDONTWRITEBYTECODE is set (pip then leaves them uncompiled), every
# process importing scipy compiled it again from source, about 4.6 CPU-seconds each (up to date: about a second).
# Not for the tests: they run with bytecode written, so each module they import is compiled once, when first
# imported (all of site-packages took 10 s of the suite's time; the tests import a small part of it).
[ "$what" = test ] || .venv/bin/python -m compileall -q -j 0 .venv/lib/python*/site-packages >/dev/null 2>&1 || true

# The qemu guests' kernel, Debian's cloud kernel: `apt-get download` and `dpkg-deb -x` into /var/cache/vnetbench/qemu
# (VNETBENCH_CACHE_DIR), never installed as this machine's kernel; nothing more when one is there. Without it
# `vm_kernel: qemu` scenarios are skipped, saying why.
qemu_kernel() { .venv/bin/python -m vnetbench.guests.qemu_image -q --cached-ok; }
qemu_kernel || { apt-get update -qq && qemu_kernel; } ||
  echo "install.sh: no guest kernel for qemu guests (see above): they will be skipped" >&2

case "$what" in
  demo)
    mkdir -p results
    .venv/bin/vnetbench clean >/dev/null
    # The run prints the short summary; the full report goes next to the results file.
    rc=0
    .venv/bin/vnetbench run examples/quick.yaml --db results/quick.db || rc=$?
    if [ "$rc" -le 1 ]; then  # done (some trials may have failed): report what was measured
      .venv/bin/vnetbench report last --db results/quick.db -o results/quick.html 2>/dev/null &&
        echo "install.sh: the full report (tables, figures, environment) is $(pwd)/results/quick.html"
    fi
    exit "$rc" ;;
  test)
    .venv/bin/vnetbench clean >/dev/null
    # The tests start hundreds of vnetbench processes: compiled once here, not in each (PYTHONDONTWRITEBYTECODE).
    .venv/bin/python -m compileall -q vnetbench >/dev/null
    # Three workers on the two cores: with two, a quarter of the CPU time went idle while tests waited (guests
    # booting, rate-limited transfers, deadlines). Each module runs whole on one worker, the longest first
    # (tests/conftest.py's scheduler for --dist loadgroup): its module-scoped fixtures are made once.
    # The `alone` tests run after the others, by themselves: a machine-wide profile saw another worker's VXLAN
    # traffic.
    # pytest keeps the test modules it rewrites (with PYTHONDONTWRITEBYTECODE each pytest process rewrote all of them
    # again: 6.5 s of its collection, 2.5 s without); the alone run collects only the modules that have such tests.
    export PYTHONDONTWRITEBYTECODE=
    .venv/bin/python -m pytest -q -p no:cacheprovider --durations=0 --durations-min=2 -n 3 --dist loadgroup -m "not alone" tests
    .venv/bin/python -m pytest -q -p no:cacheprovider -m alone $(grep -l "pytest.mark.alone" tests/test_*.py) ;;
  install) echo "install.sh: ready; try: .venv/bin/vnetbench doctor" ;;
  *) echo "usage: ./install.sh [demo|test]" >&2; exit 2 ;;
esac

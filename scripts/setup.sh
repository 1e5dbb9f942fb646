#!/usr/bin/env bash
# Set up optlease on a Debian 12 machine (as root or with sudo) and run one job:
#   scripts/setup.sh demo   -> simulate the bundled quickstart instance
#   scripts/setup.sh test   -> run the test suite on OPTLEASE_TEST_WORKERS pytest-xdist workers (3 unless set; 0 runs
#                              it in one process); extra arguments go to pytest, after ours
# System packages (mosquitto, libvirt-dev, pkg-config, python3-venv, LDAP headers; chromium for `test`) are installed
# with apt-get only when missing; Python packages come from pyproject.toml into ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need_apt+=(mosquitto)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
pkg-config --exists libvirt 2>/dev/null || need_apt+=(libvirt-dev)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
python3 -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
  || need_apt+=(python3-dev)
# python-ldap (a test dependency: the GLUE LDIF is checked by a real LDAP parser) builds against these headers
[ -f /usr/include/ldap.h ] || need_apt+=(libldap2-dev)
[ -f /usr/include/sasl/sasl.h ] || need_apt+=(libsasl2-dev)
# the tests render a report in headless Chromium (Debian's package), to check what a reader sees
if [ "${1:-demo}" = test ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing system packages: ${need_apt[*]}" >&2
  # wait up to 10 minutes for another install that holds the package lock
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.optlease-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi

case "${1:-demo}" in
  demo) shift || true
        exec .venv/bin/optlease simulate -c instances/quickstart/quickstart.conf "$@" ;;
  test) shift || true
        # most slow tests wait on a clock or a daemon rather than compute, so three workers overlap them well on two
        # cores; loadgroup keeps the tests marked with one xdist_group on one worker
        exec .venv/bin/python -m pytest -n "${OPTLEASE_TEST_WORKERS:-3}" --dist loadgroup "$@" ;;
  none) ;;
  *) echo "usage: scripts/setup.sh [demo|test|none] [extra args]" >&2; exit 2 ;;
esac

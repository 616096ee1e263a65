# Shared set-up for scripts/run and scripts/test (sourced, not executed):
# install what is missing from Debian packages, install the pinned test client
# from npm, configure and build. Idempotent: a second run installs nothing.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo_root/build"

# Build and runtime dependencies, each for a reason:
#   g++ cmake make pkg-config       the build
#   nlohmann-json3-dev              JSON (protocol, policy, specs)
#   libboost-dev                    Boost.Process: the broker starts the runner
#   libseccomp-dev                  the sandbox's syscall filter
#   libspdlog-dev                   logging to stderr
#   libcpp-httplib-dev              Streamable HTTP transport
#   doctest-dev                     unit tests
#   libssl-dev                      sha256 of inputs and artifacts
#   libmagic-dev                    artifact type sniffing (the gate)
#   libsqlite3-dev                  the job ledger
#   python3-matplotlib              charts in the default python runtime (examples/chart)
#   python3-numpy python3-pandas    the data policy's runtime (policies/data.json), from Debian
#                                   so the sandbox needs no network and no pip
#   python3                         the default sandbox runtime (/usr/bin/python3)
#   nodejs npm                      the official MCP TypeScript SDK test client
#   util-linux passwd               setpriv/useradd for the non-root test run
#   uidmap                          newuidmap/newgidmap: a normal user's sandboxes get its subordinate ids
#   clang libclang-rt-14-dev        the fuzz.* tests: libFuzzer and ASan/UBSan (tests/fuzz, scripts/fuzz)
#   libcmark-dev                    the gate parses Markdown as CommonMark's reference implementation does
#   libqpdf-dev                     the gate parses PDF (actions, JavaScript, embedded files) with qpdf
#   help2man lintian apparmor       the Debian package: its man page, and unit.package's checks
#                                   (lintian, apparmor_parser)
#   libcjose-dev libjansson-dev     OAuth access tokens (JWS) for the HTTP transport, verified by cjose
#                                   (its cjose.pc requires jansson.pc, which libcjose-dev does not pull in)
#   libc-ares-dev                   the egress proxy's name lookups: asynchronous, each bounded by its own timeout
#   clang-format-14                 unit.format: the C++ tree as .clang-format lays it out
#   iproute2 openssl curl python3-pip  integration.network_egress: its fake internet (ip netns, veth, a
#                                   test CA), and curl and pip run by jobs through the egress proxy
readonly THROWBOX_DEBS=(g++ cmake make pkg-config nlohmann-json3-dev libboost-dev libseccomp-dev
  libspdlog-dev libcpp-httplib-dev doctest-dev libssl-dev libmagic-dev libsqlite3-dev python3 python3-matplotlib
  python3-numpy python3-pandas util-linux passwd uidmap clang libclang-rt-14-dev libcmark-dev libqpdf-dev libcjose-dev libjansson-dev libc-ares-dev
  help2man lintian apparmor iproute2 openssl curl python3-pip clang-format-14)

missing_debs() {
  local pkg
  for pkg in "${THROWBOX_DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
  # Node may come from Debian (nodejs) or another source; only require a working node and npm.
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || echo "nodejs npm"
}

install_debs() {
  local missing
  missing=$(missing_debs | tr '\n' ' ')
  [ -z "${missing// /}" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "throwbox: missing Debian packages: $missing" >&2
    echo "install them as root: apt-get install -y $missing" >&2
    exit 1
  fi
  echo "throwbox: installing $missing" >&2
  apt-get update -q >&2
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2
}

install_test_client() {
  # npm ci only when the lock changed since the last install.
  local stamp="$repo_root/tests/node_modules/.throwbox-lock.sha256"
  local want
  want=$(sha256sum "$repo_root/tests/package-lock.json" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  echo "throwbox: npm ci (tests/)" >&2
  (cd "$repo_root/tests" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" >"$stamp"
}

build() {
  cmake -S "$repo_root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build_dir" -j"$(nproc)" >&2
}

setup_all() {
  install_debs
  install_test_client
  build
}

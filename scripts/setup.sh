# Shared set-up for scripts/run and scripts/test (sourced, not executed):
# install what is missing from Debian packages, install the pinned test client
# from npm, configure and build. scripts/run takes what running needs,
# scripts/test what testing adds too. Idempotent: a second run installs
# nothing and builds nothing.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo_root/build"

# What running needs (scripts/run: the server, the runner, the parser helper
# and the example), each for a reason:
#   g++ cmake pkg-config            the build
#   ninja-build                     the build: a fresh build directory uses Ninja (make is the fallback)
#   nlohmann-json3-dev              JSON (protocol, policy, specs)
#   libboost-dev                    Boost.Process: the broker starts the runner
#   libseccomp-dev                  the sandbox's syscall filter (its static archive for the runner)
#   libspdlog-dev                   logging to stderr
#   libcpp-httplib-dev              Streamable HTTP transport
#   libssl-dev                      sha256 of inputs and artifacts
#   libmagic-dev                    artifact type sniffing (the gate)
#   libsqlite3-dev                  the job ledger (one server)
#   libpq-dev                       the job ledger shared by several servers (PostgreSQL)
#   libcmark-dev                    the gate parses Markdown as CommonMark's reference implementation does
#   libqpdf-dev                     the gate parses PDF (actions, JavaScript, embedded files) with qpdf
#   libcjose-dev libjansson-dev     OAuth access tokens (JWS) for the HTTP transport, verified by cjose
#                                   (its cjose.pc requires jansson.pc, which libcjose-dev does not pull in)
#   libc-ares-dev                   the egress proxy's name lookups: asynchronous, each bounded by its own timeout
#   libarchive-dev zlib1g-dev       runtime images: their layers' tar streams read, and gzip written
#   python3                         the default sandbox runtime (/usr/bin/python3)
#   python3-matplotlib              charts in the default python runtime (examples/chart)
#   python3-numpy python3-pandas    the data policy's runtime (policies/data.json), from Debian
#                                   so the sandbox needs no network and no pip
#   nodejs npm                      the official MCP TypeScript SDK client that runs the example
#   util-linux                      setpriv, nsenter, unshare
#   uidmap                          newuidmap/newgidmap: a normal user's sandboxes get its subordinate ids
#   ccache                          a second clone or a new build/ reuses what was compiled (optional)
readonly THROWBOX_RUN_DEBS=(g++ cmake pkg-config ninja-build nlohmann-json3-dev libboost-dev libseccomp-dev
  libspdlog-dev libcpp-httplib-dev libssl-dev libmagic-dev libsqlite3-dev libpq-dev libcmark-dev libqpdf-dev libcjose-dev
  libjansson-dev libc-ares-dev libarchive-dev zlib1g-dev python3 python3-matplotlib python3-numpy python3-pandas util-linux uidmap ccache)
# What the tests add (scripts/test):
#   doctest-dev                     unit tests
#   clang libclang-rt-14-dev        the fuzz.* tests: libFuzzer and ASan/UBSan (tests/fuzz, scripts/fuzz)
#   passwd                          useradd/usermod: the users of the non-root tests
#   help2man lintian apparmor       the Debian package: its man page, and unit.package's checks
#   systemd                         (lintian, apparmor_parser, systemd-analyze on the unit)
#   iproute2 openssl curl python3-pip  integration.network_egress: its fake internet (ip netns, veth, a
#                                   test CA), and curl and pip run by jobs through the egress proxy;
#                                   ss (iproute2) for integration.http_listen
#   python3-requests                integration.credentials: requests run by jobs through the
#                                   credential proxy
#   procps                          pgrep and ps: the tests that look for a job's processes on the host
#   clang-format-14                 unit.format: the C++ tree as .clang-format lays it out
#   chromium                        integration.run_view_browser: the run view rendered in headless Chromium
#   busybox-static                  integration.runtime_image: a runtime image's one program
readonly THROWBOX_TEST_DEBS=(doctest-dev clang libclang-rt-14-dev passwd help2man lintian apparmor systemd
  iproute2 openssl curl python3-pip python3-requests procps clang-format-14 chromium busybox-static)

# missing_debs PKG...: those not installed (node and npm: a working pair from anywhere).
missing_debs() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || echo "nodejs npm"
}

# install_debs PKG...
install_debs() {
  local missing
  missing=$(missing_debs "$@" | tr '\n' ' ')
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

# install_test_client run|test: tests/node_modules from the lock. run: the
# MCP SDK alone (the example's client); test: with the conformance suites
# and their Node (devDependencies). npm ci only when the lock changed since
# the last install, or when the tests need what a run left out.
install_test_client() {
  local mode=$1 stamp="$repo_root/tests/node_modules/.throwbox-lock.sha256" want have
  want=$(sha256sum "$repo_root/tests/package-lock.json" | cut -d' ' -f1)
  have=$(cat "$stamp" 2>/dev/null || true)
  # An install without a mode in its stamp was a full one.
  if [ "$have" = "$want" ] || [ "$have" = "$want test" ] || [ "$have $mode" = "$want run run" ]; then return 0; fi
  if [ "$mode" = run ]; then
    echo "throwbox: npm ci --omit=dev (tests/)" >&2
    (cd "$repo_root/tests" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
  else
    echo "throwbox: npm ci (tests/)" >&2
    (cd "$repo_root/tests" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
  echo "$want $mode" >"$stamp"
}

# configure [-DNAME=VALUE...]: cmake runs only when build/ has no cache yet or
# one of the given values differs (later builds re-run it themselves when a
# CMakeLists.txt changes). A new build directory uses Ninja where installed;
# an existing one keeps its generator.
configure() {
  local opt need=0 gen=()
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    need=1
    command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  fi
  for opt in "$@"; do
    opt=${opt#-D}
    grep -q "^${opt%%=*}:[A-Z]*=${opt#*=}\$" "$build_dir/CMakeCache.txt" 2>/dev/null || need=1
  done
  [ $need -eq 1 ] || return 0
  cmake -S "$repo_root" -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
}

# scripts/run: the server, the runner and the parser helper, nothing else.
setup_run() {
  install_debs "${THROWBOX_RUN_DEBS[@]}"
  install_test_client run
  configure
  cmake --build "$build_dir" -j"$(nproc)" --target throwbox throwbox-runner throwbox-parser throwbox-template >&2
}

# scripts/test: everything, with the unit, integration and fuzz tests.
setup_test() {
  install_debs "${THROWBOX_RUN_DEBS[@]}" "${THROWBOX_TEST_DEBS[@]}"
  install_test_client test
  configure -DTHROWBOX_BUILD_TESTS=ON -DTHROWBOX_BUILD_FUZZ=ON
  cmake --build "$build_dir" -j"$(nproc)" >&2
}

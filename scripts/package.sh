#!/usr/bin/env bash
# Builds the Debian package from a Release build and checks it:
#   cmake (Release, -Werror) in build-pkg -> the packaged targets -> cpack -G DEB
#   -> tests/packaging/test_deb.sh (contents, Depends, the installed programs).
# SF_PKG_BUILD_DIR overrides build-pkg. SF_PKG_INSTALL=1 installs the package
# on this machine with dpkg -i and purges it again (CI does so when no
# sagafeed package is installed; it leaves the sagafeed system user); else it
# is unpacked into a scratch root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# dpkg-dev, lintian, man-db, systemd, ... (a no-op when all are there, as in CI after test.sh)
bash scripts/install-deps.sh
build=${SF_PKG_BUILD_DIR:-build-pkg}
# CMAKE_SKIP_INSTALL_ALL_DEPENDENCY: cpack installs what the targets below
# built, without first building the tests and benchmarks.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSF_WERROR=ON \
      -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
cmake --build "$build" -j"$(nproc)" \
      --target sagafeed cosmolite sagafeed-kafka-mock sf_plugin_loyalty sagafeed-man
rm -f "$build"/sagafeed_*.deb
if ! (cd "$build" && cpack -G DEB >cpack.log 2>&1); then
    cat "$build/cpack.log"
    exit 1
fi
# CI installs it for real (postinst, dpkg's own checks) when that cannot
# clobber anything: no sagafeed package is installed on the machine.
if [ -n "${CI:-}" ] && [ -z "${SF_PKG_INSTALL:-}" ] &&
    ! dpkg-query -W -f='${Status}' sagafeed 2>/dev/null | grep -q 'install ok installed'; then
    export SF_PKG_INSTALL=1
fi
version=$(sed -n 's/^project(sagafeed VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
bash tests/packaging/test_deb.sh "$build/sagafeed_${version}_$(dpkg --print-architecture).deb" "$version"

#!/usr/bin/env bash
# THE demo command: installs missing dependencies, builds the demo (build/, same as scripts/test.sh) and runs
#   build/examples/zipcomm_demo tests/data
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${ZIPCOMM_BUILD_DIR:-build}

bash scripts/install-deps.sh
if [ ! -f examples/CMakeLists.txt ]; then
  echo "!!! examples/CMakeLists.txt does not exist yet: no demo to build" >&2
  exit 1
fi
bash scripts/build.sh zipcomm_demo
demo="$BUILD_DIR/examples/zipcomm_demo"
if [ ! -x "$demo" ]; then
  echo "!!! $demo was not built (see $BUILD_DIR/build.log)" >&2
  exit 1
fi
echo "=== $demo tests/data ==="
exec "$demo" tests/data

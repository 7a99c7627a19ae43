#!/usr/bin/env bash
# The two set-up commands of the README:
#   tools/dev.sh serve [inferd flags...]   install, build, start inferd on the default model
#   tools/dev.sh test  [meson test args]   install, build, run every test
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"
BUILD=${INFERD_BUILD:-build}
tools/bootstrap.sh
if [ -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" --reconfigure -Dcuda=disabled >/dev/null
else meson setup "$BUILD" -Dcuda=disabled >/dev/null; fi
verb=${1:-}; shift || true
case $verb in
  serve) ninja -C "$BUILD"; exec "$BUILD/daemon/inferd" --config etc/inferd.toml "$@" ;;
  test)  meson test -C "$BUILD" --print-errorlogs "$@" ;;
  *) echo "usage: $0 serve|test" >&2; exit 2 ;;
esac

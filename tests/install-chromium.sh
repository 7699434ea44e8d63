#!/bin/sh
# The browser test (tests/test_board.py) renders the board in Debian's Chromium. This installs it when it
# is missing and the machine allows (root, or password-less sudo, with apt-get); otherwise it says that
# the browser test will be skipped. It never fails the test command.
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then exit 0; fi
log="${TMPDIR:-/tmp}/assay-chromium-install.log"
if [ "$(id -u)" = 0 ]; then as_root=""; elif sudo -n true >/dev/null 2>&1; then as_root="sudo -n"; else as_root=none; fi
if [ "$as_root" != none ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser test (log: $log)" >&2
  if { $as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq \
       --no-install-recommends chromium; } >"$log" 2>&1; then
    exit 0
  fi
  echo "chromium could not be installed (see $log): the browser test will be skipped" >&2
  exit 0
fi
echo "chromium is not installed (as root: apt-get install -y chromium): the browser test will be skipped" >&2
exit 0

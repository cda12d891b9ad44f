#!/usr/bin/env bash
# The first step of `make test`: checks in well under a second that what
# the tests need is on the machine, and stops with one line per missing
# piece saying how to install it (instead of a test failing minutes in).
# LazyFS is optional: without it one line says the power-loss rounds on
# LazyFS will not run, and the tests go on.
set -u
missing=0
say() { echo "make test: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "go is not on PATH: install Go 1.26 (https://go.dev/dl/)"; missing=1
fi

# PostgreSQL server binaries for examples/pg-consumer: PATH, else Debian's
# /usr/lib/postgresql/<version>/bin (the test looks in the same places).
if ! { command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; } &&
   ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  say "PostgreSQL's initdb and pg_ctl are missing (the pg-consumer test needs them): apt-get install postgresql"; missing=1
fi

# Chromium for the status page's browser test: $CHROMIUM, else /usr/bin/chromium.
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  say "Chromium is missing at $chromium (the status page's browser test needs it): apt-get install chromium, or set CHROMIUM=path"; missing=1
fi

# Python 3 with the cryptography package for the webhooks tests (the
# independent HMAC and ed25519 implementations): python3 on PATH, else
# Debian's /usr/bin/python3 (the test looks in the same places).
if ! { python3 -c 'import cryptography' 2>/dev/null || /usr/bin/python3 -c 'import cryptography' 2>/dev/null; }; then
  say "no python3 imports the cryptography package (the webhooks v1a test needs it): apt-get install python3-cryptography"; missing=1
fi

if [ -z "${MMMQ_LAZYFS:-}" ]; then
  say "MMMQ_LAZYFS is not set: the power-loss rounds on LazyFS will not run (build it with ../shared/tools/build-lazyfs.sh and export MMMQ_LAZYFS=<the path it prints>)"
elif [ ! -x "$MMMQ_LAZYFS" ]; then
  say "MMMQ_LAZYFS=$MMMQ_LAZYFS is not an executable"; missing=1
fi

exit $missing

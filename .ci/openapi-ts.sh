#!/usr/bin/env bash
# make ts-check: TypeScript types generated from modules/httpapi/openapi.yaml
# by openapi-typescript, type-checked with tsc --noEmit against a small
# usage file (modules/httpapi/client/ts/usage.ts, which calls the API
# through openapi-fetch). The three packages, at the versions given as
# arguments (the Makefile pins them), are installed by npm into
# .tmp/openapi-ts/ (gitignored) when missing or another version; the
# generated types go to .tmp/openapi-ts/check/ and are never committed.
# Needs Node.js 20+ and npm. A type error, in the generated types or in the
# usage file, fails; so does an expected error (@ts-expect-error) that is
# not one.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: .ci/openapi-ts.sh OPENAPI_TYPESCRIPT_VERSION TYPESCRIPT_VERSION OPENAPI_FETCH_VERSION" >&2; exit 2; }
[[ $# -eq 3 ]] || usage
declare -A want=([openapi-typescript]=$1 [typescript]=$2 [openapi-fetch]=$3)
prefix=.tmp/openapi-ts
fail() { echo "make ts-check: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is missing: openapi-typescript needs Node.js 20+ and npm"
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= 20)) || fail "node $(node -p 'process.versions.node') will not do: openapi-typescript ${want[openapi-typescript]} needs Node.js 20+"

specs=()
for pkg in openapi-typescript typescript openapi-fetch; do
	installed=$(node -p "try { require('./$prefix/node_modules/$pkg/package.json').version } catch (e) { '' }")
	[[ $installed == "${want[$pkg]}" ]] || specs+=("$pkg@${want[$pkg]}")
done
if ((${#specs[@]})); then
	command -v npm >/dev/null 2>&1 || fail "npm is missing: it installs ${specs[*]} into $prefix (it comes with Node.js)"
	echo "make ts-check: installing ${specs[*]} into $prefix"
	# All three on one command line with exact versions: npm keeps them in
	# $prefix/package.json, so a later install of one keeps the others.
	npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error --save-exact \
		"openapi-typescript@${want[openapi-typescript]}" "typescript@${want[typescript]}" "openapi-fetch@${want[openapi-fetch]}" >/dev/null
fi

# --default-non-nullable false: openapi-typescript otherwise makes every
# property with a default required, and the document's schemas serve
# requests too (a dispatcher's body would need paused, cloudevents, ...).
check=$prefix/check
rm -rf "$check"
mkdir -p "$check"
"$prefix/node_modules/.bin/openapi-typescript" modules/httpapi/openapi.yaml -o "$check/mmmq.ts" --default-non-nullable false --silent
cp modules/httpapi/client/ts/usage.ts modules/httpapi/client/ts/tsconfig.json "$check/"
"$prefix/node_modules/.bin/tsc" --noEmit -p "$check/tsconfig.json"
echo "make ts-check: $(grep -c '^    "/' "$check/mmmq.ts") paths typed in $check/mmmq.ts; usage.ts type-checks"

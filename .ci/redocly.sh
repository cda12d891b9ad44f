#!/usr/bin/env bash
# make lint's OpenAPI step: Redocly CLI at the version the Makefile pins
# (REDOCLY_VERSION, the one argument), installed by npm into
# .tmp/redocly/ (gitignored) when it is missing or another version, lints
# modules/httpapi/openapi.yaml with modules/httpapi/redocly.yaml (the
# recommended rules, warnings counted as errors) and the exceptions of
# modules/httpapi/.redocly.lint-ignore.yaml. Any finding fails.
# Needs Node.js 20 (20.19 or later) or 22.12+, and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: .ci/redocly.sh VERSION}
prefix=.tmp/redocly
bin=$prefix/node_modules/.bin/redocly
fail() { echo "make lint: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 ||
	fail "node is missing: Redocly CLI $version needs Node.js 20.19+ or 22.12+ and npm (e.g. NodeSource's nodejs package; Debian 12's own nodejs is 18, too old)"
node_version=$(node -p 'process.versions.node')
IFS=. read -r major minor _ <<<"$node_version"
if ! ((major == 20 && minor >= 19 || major == 22 && minor >= 12 || major >= 23)); then
	fail "node $node_version will not do: Redocly CLI $version needs Node.js 20.19+ or 22.12+"
fi

installed=$(node -p "try { require('./$prefix/node_modules/@redocly/cli/package.json').version } catch (e) { '' }")
if [[ $installed != "$version" || ! -x $bin ]]; then
	command -v npm >/dev/null 2>&1 || fail "npm is missing: it installs Redocly CLI $version into $prefix (it comes with Node.js)"
	echo "make lint: installing @redocly/cli@$version into $prefix${installed:+ (found $installed)}"
	npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "@redocly/cli@$version" >/dev/null
fi

# No telemetry, no update notice; the document's directory holds the
# configuration and the ignore file.
cd modules/httpapi
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true "../../$bin" lint --format=stylish openapi.yaml

#!/bin/sh
# How snippet_test.go builds testdata/mybroker, as a user of a clone of
# mmmq at $MMMQ_REPO would: its own module, a replace directive, a binary.
set -e
go mod init example.com/mybroker
go mod edit -require github.com/mmmq/mmmq@v0.0.0 -replace github.com/mmmq/mmmq="$MMMQ_REPO"
go mod tidy
go build -o mybroker .

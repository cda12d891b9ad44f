package contract

// Version is the broker's version, set at build time with
// -ldflags "-X github.com/mmmq/mmmq/modules/contract.Version=v1.2.3" (the
// Makefile's build does); "dev" otherwise. Pushes carry it in their
// User-Agent ("mmmq/<Version>").
var Version = "dev"

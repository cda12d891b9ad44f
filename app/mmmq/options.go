package main

import "go.uber.org/fx"

// extraOptions is the hook for build-tagged additions (crash injection in
// tests); the release build adds nothing.
var extraOptions = func() fx.Option { return fx.Options() }

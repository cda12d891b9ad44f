// Command mmmq is the mmmq broker binary.
//
//	mmmq [serve] [--config FILE]        run the broker (default command)
//	mmmq config check [--config FILE]   validate the configuration as serve would; print it with sources
//	mmmq verify [--root DIR] [--repair] [--json]  offline check of every topic; exit 3 on corruption
//	mmmq dump --topic T [--root DIR] [--from N] [--count K]
//	mmmq dispatchers list|get|create|update|delete|pause|resume|seek|redrive ...   a running broker's dispatchers
//	mmmq topics list|get NAME                                            a running broker's topics and groups
//	mmmq token new                      print a fresh bearer token and its token-sha256
//	mmmq version
//
// Exit codes: 0 clean stop or all OK; 1 startup or runtime failure, or an
// invalid configuration (one line on stderr says why), or, for dispatchers
// and topics, an error answer of the broker or a broker that cannot be
// reached; 2 bad usage; 3 corruption found (verify, dump).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mmmq/mmmq/app/loadgen"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		cmd, args = "help", args[1:]
	case len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-':
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "config":
		return configCmd(args)
	case "verify":
		return verify(args)
	case "dump":
		return dump(args)
	case "dispatchers":
		return dispatchers(args)
	case "topics":
		return topics(args)
	case "token":
		return tokenCmd(args)
	case "bench":
		return loadgen.Main(args)
	case "version":
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Println("usage: mmmq version")
			return 0
		}
		fmt.Println("mmmq", version)
		return 0
	case "help", "-h", "-help", "--help":
		usage(os.Stdout)
		return 0
	}
	fmt.Fprintf(os.Stderr, "mmmq: unknown command %q\n", cmd)
	usage(os.Stderr)
	return 2
}

// usage prints the commands to w: stdout when asked for, stderr after a
// usage error.
func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  mmmq [serve] [--config FILE]          run the broker (default: configs/mmmq.yaml if present)
  mmmq config check [--config FILE]     validate the configuration as serve would; print each key and its source
  mmmq verify [--root DIR] [--repair] [--json]
                                        check every entry and CRC offline; exit 3 on corruption
  mmmq dump --topic T [--root DIR] [--from N] [--count K]

Against a running broker (--server URL, default $MMMQ_SERVER, else http://localhost:8080):
  mmmq dispatchers list|get NAME        the dispatchers; one with its progress per topic
  mmmq dispatchers create|update NAME   add or change one (flags or --file FILE)
  mmmq dispatchers delete NAME [--delete-checkpoints]
  mmmq dispatchers pause|resume NAME
  mmmq dispatchers seek NAME --to earliest|latest|OFFSET|TIME|ts:MS [--topic PATTERN]
  mmmq dispatchers redrive NAME [--from N] [--to N]
                                        publish its dead letters to their topics again
  mmmq topics list|get NAME             the topics; one with its consumer groups
                                        (mmmq dispatchers --help, mmmq topics --help)

  mmmq token new                        print a fresh bearer token and its token-sha256 (mmmq.auth.tokens)
  mmmq bench [-mode publish|line|redis|plain|plain-server|deliver] [-url URL | -addr HOST:PORT] [-c N] [-depth D] ...
                                        load tool: HTTP, line protocol, Redis XADD (mmmq bench -h)
  mmmq version
`)
}

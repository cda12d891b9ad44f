package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/mmmq/mmmq/modules/auth"
)

const tokenUsage = `usage: mmmq token new

Prints a fresh random token (32 random bytes, "mmmq_" + base64url) and its
token-sha256, the lowercase hex SHA-256 that goes in mmmq.auth.tokens. Give
the token to the client (Authorization: Bearer <token>) or put it alone in a
token-file; the configuration holds only the digest.
`

// tokenCmd is `mmmq token new`.
func tokenCmd(args []string) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Print(named(tokenUsage))
		return 0
	}
	switch {
	case len(args) == 0:
		fmt.Fprintf(os.Stderr, "%s token: missing subcommand (new)\n", prog)
	case args[0] != "new":
		fmt.Fprintf(os.Stderr, "%s token: unknown subcommand %q (want new)\n", prog, args[0])
	case len(args) > 1:
		fmt.Fprintf(os.Stderr, "%s token new: takes no arguments or flags, got %q\n", prog, args[1])
	}
	if len(args) != 1 || args[0] != "new" {
		fmt.Fprintf(os.Stderr, "usage: %s token new (\"%s token --help\" describes it)\n", prog, prog)
		return 2
	}
	printToken(os.Stdout)
	return 0
}

// printToken writes a new token and its configuration lines to w.
func printToken(w io.Writer) {
	tok, digest := auth.NewToken()
	fmt.Fprintf(w, "token: %s\ntoken-sha256: %s\n\n", tok, digest)
	fmt.Fprintf(w, "# in the configuration file (the token itself stays with the client):\n")
	fmt.Fprintf(w, "#   mmmq:\n#     auth:\n#       tokens:\n#         - name: my-client\n#           token-sha256: %s\n", digest)
	fmt.Fprintf(w, "#           permissions: [{actions: [publish, read], topics: [\"**\"]}]\n")
}

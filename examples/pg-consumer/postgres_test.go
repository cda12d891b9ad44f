package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testPostgres is a throwaway PostgreSQL server: initdb in a temp dir, started
// with pg_ctl on a free 127.0.0.1 port with its unix socket in the same dir
// and fsync off (-F). It is stopped and removed by t.Cleanup.
type testPostgres struct {
	port int
}

// dsn is the connection string for database db (trust auth, superuser
// postgres).
func (p *testPostgres) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// connect opens a connection to dsn and returns it with a context that
// gives the caller 30 seconds; done closes the connection.
func connect(t *testing.T, dsn string) (ctx context.Context, conn *pgx.Conn, done func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		cancel()
		t.Fatalf("connect to throwaway postgres: %v", err)
	}
	return ctx, conn, func() {
		conn.Close(ctx)
		cancel()
	}
}

// createDB creates database name and returns its DSN.
func (p *testPostgres) createDB(t *testing.T, name string) string {
	t.Helper()
	ctx, conn, done := connect(t, p.dsn("postgres"))
	defer done()
	if _, err := conn.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return p.dsn(name)
}

// pgBinDir finds the directory holding initdb and pg_ctl: PATH first, then
// the newest /usr/lib/postgresql/<version>/bin (Debian installs it there
// without putting it on PATH). No PostgreSQL is a test failure, never a skip.
func pgBinDir(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir
		}
		if q, err := exec.LookPath("pg_ctl"); err == nil {
			if real, err := filepath.EvalSymlinks(q); err == nil && filepath.Dir(real) == dir {
				return dir
			}
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return pgVersion(found[i]) < pgVersion(found[j]) })
	for i := len(found) - 1; i >= 0; i-- {
		dir := filepath.Dir(found[i])
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir
		}
	}
	t.Fatal("PostgreSQL server binaries not found: initdb/pg_ctl are neither on PATH nor in /usr/lib/postgresql/*/bin. " +
		"This test starts a throwaway PostgreSQL; install it (Debian/Ubuntu: apt-get install postgresql; .ci/run does this in CI).")
	return ""
}

// pgVersion extracts <version> from /usr/lib/postgresql/<version>/bin/initdb.
func pgVersion(initdb string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(initdb))), 64)
	return v
}

// pgUser is who runs initdb and postgres. They refuse to run as root, so as
// root the test switches to the postgres user (created by Debian's package),
// else to a system user it creates.
type pgUser struct {
	name     string // "" = the current user
	uid, gid int
}

func choosePGUser(t *testing.T) pgUser {
	t.Helper()
	if os.Geteuid() != 0 {
		return pgUser{}
	}
	for _, name := range []string{"postgres", "mmmq-pg"} {
		if u, err := user.Lookup(name); err == nil {
			return toPGUser(t, u)
		}
	}
	const name = "mmmq-pg"
	out, err := exec.Command("useradd", "-r", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		t.Fatalf("tests run as root and initdb/postgres refuse root; there is no postgres user and `useradd -r %s` failed: %v\n%s\n"+
			"create an unprivileged user named postgres (Debian's postgresql package does) or run the tests as non-root", name, err, out)
	}
	t.Logf("created system user %s to run the throwaway postgres (tests run as root)", name)
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("lookup %s after useradd: %v", name, err)
	}
	return toPGUser(t, u)
}

func toPGUser(t *testing.T, u *user.User) pgUser {
	t.Helper()
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		t.Fatalf("user %s: uid %q gid %q", u.Username, u.Uid, u.Gid)
	}
	return pgUser{name: u.Username, uid: uid, gid: gid}
}

// command runs name as the chosen user: directly, with runuser, or with su.
func (u pgUser) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	switch {
	case u.name == "":
		cmd = exec.CommandContext(ctx, name, args...)
	case lookPath("runuser") != "":
		cmd = exec.CommandContext(ctx, lookPath("runuser"), append([]string{"-u", u.name, "--", name}, args...)...)
	default:
		words := []string{shellQuote(name)}
		for _, a := range args {
			words = append(words, shellQuote(a))
		}
		cmd = exec.CommandContext(ctx, "su", u.name, "-s", "/bin/sh", "-c", strings.Join(words, " "))
	}
	cmd.Dir = dir // the test's working directory may be unreadable for that user
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	return cmd
}

func lookPath(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startPostgres initdbs and starts a throwaway server.
func startPostgres(t *testing.T) *testPostgres {
	t.Helper()
	bin := pgBinDir(t)
	u := choosePGUser(t)

	// Not t.TempDir: its parents are 0700 root dirs the postgres user cannot
	// enter, and its long name could exceed the unix socket path limit.
	base := os.TempDir()
	if u.name != "" || len(base) > 40 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "mmmq-pg-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if u.name != "" {
		if err := os.Chown(dir, u.uid, u.gid); err != nil {
			t.Fatalf("chown %s to %s: %v", dir, u.name, err)
		}
	}
	data := filepath.Join(dir, "data")
	logFile := filepath.Join(dir, "postgres.log")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	initdb := u.command(ctx, dir, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb (%s, as %s): %v\n%s", bin, userName(u), err, out)
	}

	pgctl := filepath.Join(bin, "pg_ctl")
	var port int
	for attempt := 1; ; attempt++ {
		port = freePort(t)
		opts := fmt.Sprintf("-k %s -c listen_addresses=127.0.0.1 -p %d -F", dir, port)
		start := u.command(ctx, dir, pgctl, "-D", data, "-l", logFile, "-w", "-t", "60", "-o", opts, "start")
		out, err := start.CombinedOutput()
		if err == nil {
			break
		}
		logText, _ := os.ReadFile(logFile)
		if attempt == 3 {
			t.Fatalf("pg_ctl start (as %s): %v\n%s\nserver log:\n%s", userName(u), err, out, logText)
		}
		t.Logf("pg_ctl start on port %d failed (attempt %d), retrying: %v\n%s", port, attempt, err, bytes.TrimSpace(logText))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := u.command(ctx, dir, pgctl, "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	return &testPostgres{port: port}
}

func userName(u pgUser) string {
	if u.name == "" {
		return "current user"
	}
	return u.name
}

package app_test

// The status page (plugins/ui, /ui/) in a real browser: headless Chromium
// driven by chromedp against a full broker with a dispatcher in backoff, a
// delivering one, a consumer group holding a session, a failed topic and a
// message written to attack the page. The selectors are the status page's
// DOM contract (plugins/ui); each assertion reads the text the browser
// shows.
//
// Chromium is required (never skipped): apt-get install chromium, or set
// CHROMIUM to the browser's path. MMMQ_UI_SCREENSHOT_DIR names where the
// full-page screenshot status-page.png goes (make ui-screenshot: plugins/ui/, shown in the README).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// xssContent is a message content that runs script if the page does not
// escape it.
const xssContent = `<script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">`

// hookedFS is an FS whose open files ask hook (see failOn) before each
// Sync; a nil hook passes. It puts an injected fsync fault on the real
// disk, so the page shows a real data directory and free space.
type hookedFS struct {
	vfs.FS
	hook atomic.Pointer[func(vfs.Op, string) error]
}

func (h *hookedFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &hookedFile{File: f, fs: h, name: name}, nil
}

func (h *hookedFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	return h.wrap(name, f, err)
}
func (h *hookedFS) OpenRW(name string) (vfs.File, error) {
	f, err := h.FS.OpenRW(name)
	return h.wrap(name, f, err)
}
func (h *hookedFS) Open(name string) (vfs.File, error) {
	f, err := h.FS.Open(name)
	return h.wrap(name, f, err)
}

type hookedFile struct {
	vfs.File
	fs   *hookedFS
	name string
}

func (f *hookedFile) Sync() error {
	if hook := f.fs.hook.Load(); hook != nil {
		if err := (*hook)(vfs.OpSync, f.name); err != nil {
			return err
		}
	}
	return f.File.Sync()
}

// chromiumPath is $CHROMIUM, else /usr/bin/chromium; the test fails, saying
// how to install it, when there is no such executable.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(p); err != nil {
		t.Fatalf("the status page test needs Chromium: %v; install it (Debian/Ubuntu: apt-get install chromium) or set CHROMIUM to the browser's path", err)
	}
	return p
}

// newBrowser starts headless Chromium (a fresh profile) and returns its
// context; everything the test does in it must end within 60 s.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium-profile")),
		chromedp.WindowSize(1280, 1000),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	_, err := chromedp.Run(ctx, chromedp.Evaluate[int](`1`))
	require.NoError(t, err, "start Chromium")
	return ctx
}

// open navigates to url and requires a 200 answer.
func open(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(url))
	require.NoError(t, err, "navigate to %s", url)
	require.Equal(t, http.StatusOK, int(resp.Status), "GET %s: %d %s", url, resp.Status, resp.StatusText)
}

// text is the visible text (innerText) of the first element matching the
// CSS selector sel, trimmed.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, "text of %s", sel)
	return strings.TrimSpace(s)
}

// count is the number of elements matching the CSS selector sel.
func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	require.NoError(t, err, "count %s", sel)
	return n
}

// eventually opens url again (the page's own refresh is not relied on)
// until ok holds of the text of sel, for up to 20 s, and returns that text.
func eventually(t *testing.T, ctx context.Context, url, sel string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		open(t, ctx, url)
		s := text(t, ctx, sel)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s reads %q, still not what the test waits for", sel, url, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// consoleErrors collects the page's uncaught exceptions and error-level
// console and browser-log entries (a CSP violation is one), but the
// favicon's 404.
func consoleErrors(ctx context.Context) func() []string {
	var mu sync.Mutex
	var errs []string
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type != chromedp.ConsoleException && m.Type != "error" || strings.Contains(m.URL, "favicon.ico") {
				continue
			}
			mu.Lock()
			errs = append(errs, fmt.Sprintf("%s (%s %s:%d)", m, m.Source, m.URL, m.Line))
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// screenshotDir is $MMMQ_UI_SCREENSHOT_DIR, else the test's artifact
// directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("MMMQ_UI_SCREENSHOT_DIR"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.ArtifactDir()
}

// TestStatusPageInBrowser: /ui/ in headless Chromium shows the broker as
// it is — version and counts, each topic, a dispatcher backing off from a
// consumer that is down, one that delivered everything, a consumer group
// held by a live session, a failed topic with its cause — and its pause
// button pauses a dispatcher (the page then offers resume). A topic page
// shows a message written to attack it as text: no script runs.
func TestStatusPageInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	pageErrors := consoleErrors(ctx)

	// A consumer that is down: a port nobody listens on (refused at once).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	up := newConsumer(t)

	fsys := &hookedFS{FS: vfs.OS{}}
	cfg := testConfig(t, t.TempDir())
	// billing stays in backoff while the test looks; the group's session
	// outlives the test.
	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) { d.BackoffInitial, d.BackoffMax = time.Minute, time.Minute })
	config.EditSection(cfg, groups.ConfigSection, func(g *groups.Config) { g.LeaseTimeout = 5 * time.Minute })
	var mgr *dispatcher.Manager
	a, base := startBroker(t, cfg,
		fx.Decorate(func(vfs.FS) vfs.FS { return fsys }),
		fx.Populate(&mgr),
		provideDispatcher(dispatcher.New("billing", hostOfURL(t, down), dispatcher.MustPattern("payments.*"))),
		provideDispatcher(dispatcher.New("shipping", up.host(t), dispatcher.MustPattern("orders.**"))),
	)
	defer a.RequireStop()

	const orders, payments, inventory, notes = "orders.created", "payments.failed", "inventory.synced", "notes.xss"
	publishN(t, base, orders, 3)
	publishN(t, base, payments, 2)
	up.waitFor(t, 3)
	require.Eventually(t, func() bool {
		return workerStatus(mgr, "shipping", orders).Committed == 3 &&
			workerStatus(mgr, "billing", payments).State == dispatcher.StateBackoff
	}, 20*time.Second, 10*time.Millisecond, "shipping delivers, billing backs off")

	// Group audit: a live session fetched the three, acknowledged the first.
	sess, msgs := groupFetch(t, base, orders, "audit", "")
	require.Len(t, msgs, 3)
	groupAck(t, base, orders, "audit", sess, 0)

	// A failed topic: its segment's fsync fails with EIO.
	publishN(t, base, inventory, 1)
	var fired atomic.Int64
	hook := failOn(vfs.OpSync, inventory, storage.SegmentExt, syscall.EIO, false, &fired)
	fsys.hook.Store(&hook)
	st, out := publishAt(t, base, inventory, map[string]any{"n": 1}, "")
	requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)

	// The attack, with its < and > as they are (json.Marshal would escape
	// them as \u003c).
	resp, err := http.Post(base+"/messages", "application/json",
		strings.NewReader(`{"topic":"`+notes+`","content":`+fmt.Sprintf("%q", xssContent)+`}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	ui := base + "/ui/"
	open(t, ctx, ui)
	_, err = chromedp.Run(ctx, chromedp.WaitVisible(chromedp.CSS("#dispatchers")))
	require.NoError(t, err)
	// The page reloads itself, but not while the user is typing into a
	// form: a seek target half typed survives two refresh periods; once the
	// field is back as it was, the page reloads (window.mark is gone).
	seekTo := `div.actions[data-dispatcher="billing"] form.seek input[name=to]`
	_, err = chromedp.Run(ctx, chromedp.Evaluate[int](`window.mark = 1`))
	require.NoError(t, err)
	_, err = chromedp.Run(ctx, chromedp.SendKeys(chromedp.CSS(seekTo), "lat"))
	require.NoError(t, err)
	time.Sleep(5 * time.Second) // the refresh period is 2 s
	typed, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(window.mark || 0) + ":" + document.querySelector('`+seekTo+`').value`))
	require.NoError(t, err)
	assert.Equal(t, "1:lat", typed, "no reload while a form is being filled in")
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(function(){var e=document.querySelector('`+seekTo+`'); e.value=e.defaultValue; e.blur(); return true})()`))
	require.NoError(t, err)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		reloaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.mark === undefined && document.readyState === "complete"`))
		if err == nil && reloaded {
			break
		}
		require.False(t, time.Now().After(deadline), "the page did not reload itself within 10 s once the form was left")
	}

	// The page's own refresh off: the test opens the page again instead.
	_, err = chromedp.Run(ctx, chromedp.Click(chromedp.CSS("button#refresh-toggle")))
	require.NoError(t, err)
	for deadline := time.Now().Add(5 * time.Second); text(t, ctx, "button#refresh-toggle") != "Resume refresh"; {
		require.False(t, time.Now().After(deadline), "the refresh toggle reads %q, want %q",
			text(t, ctx, "button#refresh-toggle"), "Resume refresh")
		time.Sleep(50 * time.Millisecond)
	}

	// Sections and overview.
	for sel, title := range map[string]string{
		"#overview h2": "Overview", "#topics h2": "Topics", "#dispatchers h2": "Dispatchers", "#groups h2": "Consumer groups",
	} {
		assert.Equal(t, title, text(t, ctx, sel), sel)
	}
	dd := func(k string) string { return text(t, ctx, `#overview dd[data-k="`+k+`"]`) }
	assert.Contains(t, dd("version"), contract.Version)
	assert.Equal(t, "4", dd("topics"))
	assert.Equal(t, "2", dd("dispatchers"))
	assert.Equal(t, "1", dd("groups"))
	assert.Equal(t, "1", dd("failed-topics"))
	assert.Contains(t, dd("data-dir"), config.SectionValue(cfg, topicqueue.StorageSection).RootDir)
	assert.Regexp(t, `\d`, dd("disk-free"))
	// The rate needs two samples at least a second apart: "—" until then.
	rate := eventually(t, ctx, ui, `#overview dd[data-k="publish-rate"]`,
		func(s string) bool { return regexp.MustCompile(`^\d+\.\d$`).MatchString(s) })
	assert.Regexp(t, `^\d+\.\d$`, rate, "messages per second")
	assert.Equal(t, 1, count(t, ctx, "ul#failed-topics > li.bad"), "one failed topic")
	failed := text(t, ctx, "ul#failed-topics > li.bad")
	assert.Contains(t, failed, inventory)
	assert.Contains(t, failed, "input/output error", "the cause is named")

	// Topics.
	row := func(topic string) string { return `table#topic-table tr[data-topic="` + topic + `"]` }
	for topic, next := range map[string]string{orders: "3", payments: "2", inventory: "1", notes: "1"} {
		assert.Equal(t, topic, text(t, ctx, row(topic)+" td.name"))
		assert.Equal(t, next, text(t, ctx, row(topic)+" td.next"), topic)
		assert.Equal(t, "0", text(t, ctx, row(topic)+" td.start"), topic)
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+row(orders)+` td.name a').getAttribute('href')`))
	require.NoError(t, err)
	assert.Contains(t, href, "/ui/topics/"+orders)
	readers := text(t, ctx, row(orders)+" td.readers")
	assert.Regexp(t, `shipping: lag 0\b`, readers)
	assert.Regexp(t, `audit: lag 2\b`, readers)
	assert.Regexp(t, `billing: lag 2\b`, text(t, ctx, row(payments)+" td.readers"))

	// Dispatchers: billing backs off (the page shows the state the admin
	// API reports, and when it retries), shipping delivered everything.
	drow := func(d, topic string) string {
		return `table#dispatcher-table tr[data-dispatcher="` + d + `"][data-topic="` + topic + `"]`
	}
	state := eventually(t, ctx, ui, drow("billing", payments)+" td.state",
		func(s string) bool { return strings.HasPrefix(s, dispatcher.StateBackoff) })
	assert.Regexp(t, `^backoff\b`, state)
	assert.Regexp(t, `next retry in \d+\s*s`, text(t, ctx, drow("billing", payments)+" td.state span.next-retry"))
	assert.Equal(t, "2", text(t, ctx, drow("billing", payments)+" td.lag"))
	assert.Contains(t, text(t, ctx, drow("billing", payments)+" td.error"), "refused", "the last error")
	assert.Regexp(t, `\d`, text(t, ctx, drow("billing", payments)+" td.oldest"), "the oldest unacknowledged message's age")
	assert.Contains(t, text(t, ctx, drow("billing", payments)+" td.patterns"), "payments.*")
	assert.Equal(t, 1, count(t, ctx, `table#dispatcher-table tr[data-dispatcher="billing"]`), "billing reads one topic")

	assert.Equal(t, dispatcher.StateIdle, text(t, ctx, drow("shipping", orders)+" td.state"))
	assert.Equal(t, "0", text(t, ctx, drow("shipping", orders)+" td.lag"))
	assert.Contains(t, text(t, ctx, drow("shipping", orders)+" td.host"), strings.TrimPrefix(up.srv.URL, "http://"))
	assert.Contains(t, text(t, ctx, drow("shipping", orders)+" td.patterns"), "orders.**")
	assert.Equal(t, 1, count(t, ctx, `table#dispatcher-table tr[data-dispatcher="shipping"]`), "shipping reads one topic")
	for _, d := range []string{"billing", "shipping"} {
		assert.Equal(t, 1, count(t, ctx, `div.actions[data-dispatcher="`+d+`"] form.pause button[type=submit]`), d)
		assert.Zero(t, count(t, ctx, `div.actions[data-dispatcher="`+d+`"] form.resume`), "%s is not paused", d)
		assert.Equal(t, 1, count(t, ctx, `div.actions[data-dispatcher="`+d+`"] form.seek input[name=to]`), d)
		assert.Equal(t, 1, count(t, ctx, `svg.sparkline[data-dispatcher="`+d+`"]`), d)
	}
	assert.Equal(t, 4, count(t, ctx, `div.actions form`), "pause and seek of each dispatcher")
	assert.Equal(t, 4, count(t, ctx, `div.actions form input[type=hidden][name=csrf]`), "every form carries a CSRF token")

	// The consumer group: committed 1 of 3, held by the session.
	grow := `table#group-table tr[data-topic="` + orders + `"][data-group="audit"]`
	assert.Equal(t, "1", text(t, ctx, grow+" td.committed"))
	assert.Equal(t, "2", text(t, ctx, grow+" td.lag"))
	assert.Equal(t, "held", text(t, ctx, grow+" td.holder"))
	assert.Regexp(t, `^\d+\s*(s|m)`, text(t, ctx, grow+" td.lease"))

	// Screenshot of the page as it is now (every section filled).
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG (any other quality is JPEG)
	require.NoError(t, err)
	shot := filepath.Join(screenshotDir(t), "status-page.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)

	// Pause shipping with its button: the POST redirects back to the page,
	// which shows it paused and offers resume instead of pause.
	resp2, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`div.actions[data-dispatcher="shipping"] form.pause button`)))
	require.NoError(t, err, "click pause")
	require.Equal(t, http.StatusOK, int(resp2.Status), "after pause: %s", resp2.URL)
	assert.Regexp(t, regexp.QuoteMeta(base)+`/ui/`, resp2.URL)
	_, err = chromedp.Run(ctx, chromedp.WaitVisible(chromedp.CSS(`div.actions[data-dispatcher="shipping"] form.resume button`)))
	require.NoError(t, err)
	assert.True(t, mgr.Paused("shipping"), "the dispatcher is paused")
	assert.Equal(t, dispatcher.StatePaused, text(t, ctx, drow("shipping", orders)+" td.state"))
	assert.Zero(t, count(t, ctx, `div.actions[data-dispatcher="shipping"] form.pause`), "pause is no longer offered")
	assert.Equal(t, 1, count(t, ctx, `div.actions[data-dispatcher="shipping"] form.resume button[type=submit]`))
	assert.False(t, mgr.Paused("billing"))
	assert.Equal(t, 1, count(t, ctx, `div.actions[data-dispatcher="billing"] form.pause`), "billing still runs")

	// The attack on a topic page is text: no script ran, the content cell
	// shows the markup.
	open(t, ctx, base+"/ui/topics/"+notes)
	title, err := chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	assert.NotEqual(t, "pwned", title)
	assert.Equal(t, 1, count(t, ctx, `table#messages tr[data-offset]`))
	cell := text(t, ctx, `table#messages tr[data-offset="0"] td.content`)
	assert.Contains(t, cell, "<script>document.title='pwned'</script>")
	assert.Contains(t, cell, `<img src=x onerror=`)
	assert.Zero(t, count(t, ctx, `table#messages script, table#messages img`), "no element was made of the content")
	// An onerror handler runs after the load: look again a moment later.
	time.Sleep(300 * time.Millisecond)
	title, err = chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	assert.NotEqual(t, "pwned", title)

	assert.Empty(t, pageErrors(), "the pages logged errors (a CSP violation is one)")
}

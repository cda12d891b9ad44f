package contract_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestClassify pins the one error table: every error kind a transport
// answers, wrapped as the modules wrap them, and the precedence when an
// error carries several codes.
func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"bad request", contract.BadRequest("x"), 400, contract.CodeBadRequest},
		{"too large input", contract.TooLarge("x"), 413, contract.CodeTooLarge},
		{"body not in time", contract.RequestTimeout("x"), 408, contract.CodeTimeout},
		{"max bytes reader", fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 1}), 413, contract.CodeTooLarge},
		{"record too large", fmt.Errorf("append: %w", contract.ErrRecordTooLarge), 413, contract.CodeTooLarge},
		{"empty record", fmt.Errorf("append: %w", contract.ErrEmptyRecord), 400, contract.CodeBadRequest},
		{"invalid topic", fmt.Errorf("%w: empty", topicqueue.ErrInvalidName), 400, contract.CodeBadRequest},
		{"too many topics", topicqueue.ErrTooManyTopics, 503, contract.CodeTooManyTopics},
		{"failed log, disk full", fmt.Errorf("write: %w", errors.Join(storage.ErrFailed, syscall.ENOSPC)), 503, contract.CodeTopicFailed},
		{"failed log, disk full (wrapped %w %w)", fmt.Errorf("%w: %w", storage.ErrFailed, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}), 503, contract.CodeTopicFailed},
		{"failed log wrapping the guard's refusal too", errors.Join(storage.ErrNoSpace, storage.ErrFailed), 503, contract.CodeTopicFailed},
		{"disk guard", fmt.Errorf("append: %w", &storage.LowSpaceError{Free: 1, MinFree: 2}), 507, contract.CodeNoSpace},
		{"bare ENOSPC", &os.PathError{Op: "open", Path: "x", Err: syscall.ENOSPC}, 507, contract.CodeNoSpace},
		{"bare EDQUOT", fmt.Errorf("mkdir: %w", syscall.EDQUOT), 507, contract.CodeNoSpace},
		{"failed log", fmt.Errorf("fsync: %w", storage.ErrFailed), 503, contract.CodeTopicFailed},
		{"reopen of a healthy topic", fmt.Errorf("reopen: %w", storage.ErrNotFailed), 409, contract.CodeTopicNotFailed},
		{"append during reopen", fmt.Errorf("append: %w", storage.ErrReopening), 409, contract.CodeTopicBusy},
		{"reopen of an unknown topic", fmt.Errorf("%w: t", topicqueue.ErrNotFound), 404, contract.CodeNotFound},
		{"queue full", contract.ErrQueueFull, 503, contract.CodeUnavailable},
		{"deadline", fmt.Errorf("append: %w", context.DeadlineExceeded), 503, contract.CodeTimeout},
		{"group busy", &groups.BusyError{Topic: "t", Group: "g"}, 409, contract.CodeGroupBusy},
		{"not delivered", fmt.Errorf("ack: %w", groups.ErrNotDelivered), 409, contract.CodeNotDelivered},
		{"session expired", groups.ErrSessionExpired, 409, contract.CodeSessionExpired},
		{"name taken", groups.ErrNameTaken, 409, contract.CodeNameTaken},
		{"unknown topic", groups.ErrUnknownTopic, 404, contract.CodeNotFound},
		{"invalid group name", groups.ErrInvalidName, 400, contract.CodeBadRequest},
		{"offset committed", groups.ErrInvalidOffset, 400, contract.CodeBadRequest},
		{"too many groups", groups.ErrTooManyGroups, 503, contract.CodeTooManyGroups},
		{"invalid name inside a busy group error", errors.Join(groups.ErrGroupBusy, topicqueue.ErrInvalidName), 400, contract.CodeBadRequest},
		{"offset expired", fmt.Errorf("fetch: %w", &contract.OffsetExpiredError{Topic: "t", Offset: 0, StartOffset: 1024}), 410, contract.CodeOffsetExpired},
		{"offset expired sentinel", contract.ErrOffsetExpired, 410, contract.CodeOffsetExpired},
		{"push loop", fmt.Errorf("%w (dispatcher \"d\")", contract.ErrLoop), 508, contract.CodeLoop},
		{"unknown error", errors.New("boom"), 503, contract.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := contract.Classify(tt.err)
			if c.Status != tt.status || c.Code != tt.code {
				t.Errorf("Classify(%v) = %d %s, want %d %s", tt.err, c.Status, c.Code, tt.status, tt.code)
			}
		})
	}
}

// Sentinels made by NewError keep their text and their identity.
func TestNewErrorIsASentinel(t *testing.T) {
	if got := storage.ErrNoSpace.Error(); got != "storage: no space left on device" {
		t.Errorf("text = %q", got)
	}
	wrapped := fmt.Errorf("append: %w", storage.ErrNoSpace)
	if !errors.Is(wrapped, storage.ErrNoSpace) || errors.Is(wrapped, contract.ErrRecordTooLarge) {
		t.Error("errors.Is does not tell the sentinels apart")
	}
}

// TestNoSpaceRetryAfter: a NO_SPACE answer (the disk guard) carries
// Retry-After; a TOPIC_FAILED one (needs an operator) does not.
func TestNoSpaceRetryAfter(t *testing.T) {
	rec := httptest.NewRecorder()
	contract.WriteErr(rec, &storage.LowSpaceError{Free: 1, MinFree: 2})
	if rec.Code != 507 || rec.Header().Get("Retry-After") != contract.NoSpaceRetryAfter || !strings.Contains(rec.Body.String(), `"code":"NO_SPACE"`) {
		t.Fatalf("answer %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	rec = httptest.NewRecorder()
	contract.WriteErr(rec, fmt.Errorf("append: %w", storage.ErrFailed))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "" || !strings.Contains(rec.Body.String(), `"code":"TOPIC_FAILED"`) {
		t.Fatalf("answer %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}

// TestOverloaded: ErrOverloaded is 503 OVERLOADED, and its HTTP answer
// carries Retry-After.
func TestOverloaded(t *testing.T) {
	b := contract.NewBudget(10)
	err := b.Overloaded("fetch of group g of topic t", 11)
	if c := contract.Classify(err); c.Status != http.StatusServiceUnavailable || c.Code != contract.CodeOverloaded {
		t.Fatalf("Classify = %+v", c)
	}
	rec := httptest.NewRecorder()
	contract.WriteErr(rec, err)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != contract.OverloadedRetryAfter || !strings.Contains(rec.Body.String(), `"code":"OVERLOADED"`) {
		t.Fatalf("answer %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}

// TestBudget: acquisitions over the cap fail, releases make room, and a
// nil or zero-cap budget admits everything.
func TestBudget(t *testing.T) {
	b := contract.NewBudget(100)
	if !b.TryAcquire(60) || b.TryAcquire(41) || !b.TryAcquire(40) || b.InUse() != 100 || b.TryAcquire(1) {
		t.Fatalf("in use %d", b.InUse())
	}
	b.Release(60)
	b.Release(40)
	if b.InUse() != 0 || !b.TryAcquire(100) {
		t.Fatalf("in use %d", b.InUse())
	}
	var none *contract.Budget
	if !none.TryAcquire(1<<40) || none.InUse() != 0 {
		t.Fatal("nil budget")
	}
	none.Release(5)
	u := contract.NewBudget(0)
	if !u.TryAcquire(1<<40) || u.InUse() != 1<<40 || u.Max() != 0 {
		t.Fatal("unlimited budget")
	}
}

// TestOffsetExpiredBody: a 410 OFFSET_EXPIRED answer carries the log start
// offset, so the client knows where to continue; other errors carry none.
func TestOffsetExpiredBody(t *testing.T) {
	rec := httptest.NewRecorder()
	contract.WriteErr(rec, fmt.Errorf("read: %w", &contract.OffsetExpiredError{Topic: "t", Offset: 3, StartOffset: 1024}))
	if rec.Code != http.StatusGone || !strings.Contains(rec.Body.String(), `"code":"OFFSET_EXPIRED","startOffset":1024`) {
		t.Fatalf("answer %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	contract.WriteErr(rec, contract.ErrQueueFull)
	if strings.Contains(rec.Body.String(), "startOffset") {
		t.Fatalf("answer %d %s", rec.Code, rec.Body)
	}
}

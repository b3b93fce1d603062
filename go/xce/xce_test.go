package xce

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

var bg = context.Background()

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestVersionAndTexts(t *testing.T) {
	if v := Version(); strings.Count(v, ".") != 2 {
		t.Fatalf("Version() = %q", v)
	}
	if got := Strerror(-CodeNotReady); got != "cluster not ready" {
		t.Fatalf("Strerror(-E_XCE_NOT_READY) = %q", got)
	}
	if Strerror(CodeNotReady) != Strerror(-CodeNotReady) {
		t.Fatal("Strerror depends on the sign")
	}
	if !strings.EqualFold(Strerror(int(syscall.ECONNREFUSED)), syscall.ECONNREFUSED.Error()) {
		t.Fatalf("errno text %q", Strerror(int(syscall.ECONNREFUSED)))
	}
}

func TestErrorsIs(t *testing.T) {
	var err error = &Error{Op: "joblist", Code: CodeNotReady}
	if !errors.Is(err, ErrNotReady) {
		t.Fatal("errors.Is(err, ErrNotReady) is false")
	}
	if errors.Is(err, ErrAuth) || errors.Is(err, ErrInvalid) {
		t.Fatal("a NOT_READY error matched another sentinel")
	}
	if err.Error() != "xce: joblist: cluster not ready" {
		t.Fatalf("text %q", err.Error())
	}
	var xe *Error
	if !errors.As(err, &xe) || xe.Op != "joblist" {
		t.Fatal("errors.As")
	}
	refused := &Error{Op: "start", Code: int(syscall.ECONNREFUSED)}
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatal("errno errors do not unwrap to syscall.Errno")
	}
	if errors.Unwrap(err) != nil {
		t.Fatal("E_XCE codes must not unwrap to an errno")
	}
}

func TestStartBadMasters(t *testing.T) {
	for _, m := range []string{"", "host", "host:0", "host:70000", "a:1,", "a:1,,b:2"} {
		if _, err := Start(bg, Config{Masters: m}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Start(%q) = %v, want EINVAL", m, err)
		}
	}
	if _, err := Start(bg, Config{Masters: "h:1", TLSCert: "/x.pem"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("cert without key: %v", err)
	}
	if _, err := Start(bg, Config{Masters: "h:1", ClientName: strings.Repeat("n", 300)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("long client name: %v", err)
	}
}

func TestStartClosedPort(t *testing.T) {
	_, err := Start(bg, Config{Masters: closedPort(t) + "," + closedPort(t)})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Start against closed ports = %v, want ECONNREFUSED", err)
	}
}

func TestNewJobID(t *testing.T) {
	seen := map[uint64]bool{}
	for i := 0; i < 1000; i++ {
		id := NewJobID()
		if id == 0 || seen[id] {
			t.Fatalf("job id %d zero or repeated", id)
		}
		seen[id] = true
	}
}

func TestDefaultRetry(t *testing.T) {
	want := RetryConfig{20, 50, 5000, 2.0}
	if DefaultRetry != want {
		t.Fatalf("DefaultRetry = %+v", DefaultRetry)
	}
}

func TestClosedClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Start(bg, Config{Masters: l.Addr().String(), ClientName: "go-test"})
	if err != nil {
		t.Fatalf("Start against a listener: %v", err)
	}
	if err := c.SetOption(Option(999), 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown option: %v", err)
	}
	if err := c.SetRetry(&RetryConfig{MaxRetries: 1, InitialRetryMs: 0, MaxRetryMs: 1, BackoffMultiplier: 2}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad retry config: %v", err)
	}
	if err := c.SetRetry(nil); err != nil {
		t.Fatal(err)
	}
	if err := c.JobCtrl(bg, 1, 99); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown jobctrl action: %v", err)
	}
	if _, err := c.Stats(); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Masters(); err != nil || len(m) != 1 || m[0] != l.Addr().String() {
		t.Fatalf("Masters: %q, %v", m, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Masters(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Masters after Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.JobList(bg, JobFilter{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

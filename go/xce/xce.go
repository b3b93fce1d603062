// Package xce is the Go binding of libxce (the C API in <xce/xce.h>) through cgo: one *Client
// shared by many goroutines, a context.Context on every call, errors comparable with
// errors.Is (errors.Is(err, xce.ErrNotReady) is "cluster not ready").
//
// Import path and building:
//
//	import "github.com/xce-project/libxce/go/xce"
//
// The package links libxce through pkg-config (`#cgo pkg-config: xce`), so it builds against an
// installed library (scripts/install.sh PREFIX writes PREFIX/lib/pkgconfig/xce.pc; add that
// directory to PKG_CONFIG_PATH unless it is a system one) or against a build tree (the test
// command writes an xce-uninstalled.pc there). From a checkout instead of a published version,
// point your go.mod at it:
//
//	require github.com/xce-project/libxce/go v0.1.0
//	replace github.com/xce-project/libxce/go => /path/to/libxce/go
//
// Go's build cache does not notice a changed .pc file (golang/go#24544): after switching
// between a build tree and an installed library, run `go clean -cache` (or build with -a).
//
// The library installs no signal handlers and starts no threads of its own beyond
// short-lived, signal-blocking getaddrinfo helpers, so it is safe under the Go runtime. A call blocks its goroutine's OS thread until it ends: at the latest when the
// context's retry budget is spent, when its context.Context is cancelled or reaches its
// deadline, or when the Client is closed.
package xce

/*
#cgo pkg-config: xce
#include <errno.h>
#include <stdlib.h>
#include <xce/xce.h>
*/
import "C"

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Status codes of protocol.md (the header's E_XCE_* values).
const (
	CodeRedirect = C.E_XCE_REDIRECT
	CodeNoMaster = C.E_XCE_NOMASTER
	CodeNotReady = C.E_XCE_NOT_READY
	CodeStandby  = C.E_XCE_STANDBY
	CodeDupJob   = C.E_XCE_DUP_JOB
	CodeProto    = C.E_XCE_PROTO
	CodeAuth     = C.E_XCE_AUTH
	CodeTLS      = C.E_XCE_TLS
	CodeInternal = C.E_XCE_INTERNAL
	// CodeClosed: the context is stopped (E_XCE_CLOSED): the Client was closed.
	CodeClosed = C.E_XCE_CLOSED
	// CodeLookup: a master's host name could not be resolved (E_XCE_LOOKUP).
	CodeLookup = C.E_XCE_LOOKUP
	// CodeStopRequested: a stop was requested on the client (E_XCE_STOP_REQUESTED, F27).
	CodeStopRequested = C.E_XCE_STOP_REQUESTED
	// CodeCorrupt: the cluster's CORRUPT alarm is raised (E_XCE_CORRUPT, C19): writes are
	// refused until an operator repairs it; reads go on. Never retried.
	CodeCorrupt = C.E_XCE_CORRUPT
)

// Error is a failed call: the op and the library's status (a positive errno or E_XCE_* code).
// A call ended by its context.Context carries the context's error too.
type Error struct {
	Op   string
	Code int
	// Ctx is context.Canceled or context.DeadlineExceeded when the call's context ended it.
	Ctx error
}

func (e *Error) Error() string {
	var text string
	switch {
	case e.Ctx != nil:
		text = e.Ctx.Error()
	default:
		text = Strerror(e.Code)
	}
	if e.Op == "" {
		return "xce: " + text
	}
	return "xce: " + e.Op + ": " + text
}

// Is makes errors.Is(err, xce.ErrNotReady) (and the other sentinels) match any *Error with
// the same code, whatever the op.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap exposes the context's error for a call its context ended (errors.Is(err,
// context.Canceled)), and errno values as syscall.Errno (errors.Is(err, syscall.ECONNREFUSED)).
func (e *Error) Unwrap() error {
	if e.Ctx != nil {
		return e.Ctx
	}
	if e.Code > 0 && e.Code < 2000 {
		return syscall.Errno(e.Code)
	}
	return nil
}

// Sentinels for errors.Is.
var (
	ErrRedirect = &Error{Code: CodeRedirect}
	ErrNoMaster = &Error{Code: CodeNoMaster}
	// ErrNotReady: no primary within the retry budget ("cluster not ready").
	ErrNotReady = &Error{Code: CodeNotReady}
	ErrStandby  = &Error{Code: CodeStandby}
	ErrDupJob   = &Error{Code: CodeDupJob}
	ErrProto    = &Error{Code: CodeProto}
	ErrAuth     = &Error{Code: CodeAuth}
	ErrTLS      = &Error{Code: CodeTLS}
	ErrInternal = &Error{Code: CodeInternal}
	// ErrInvalid: a bad argument (EINVAL).
	ErrInvalid = &Error{Code: int(syscall.EINVAL)}
	// ErrNotFound: no such job, host or queue (ENOENT).
	ErrNotFound = &Error{Code: int(syscall.ENOENT)}
	// ErrClosed: the Client was closed (before or during the call).
	ErrClosed = &Error{Code: CodeClosed}
	// ErrLookup: a master's host name could not be resolved.
	ErrLookup = &Error{Code: CodeLookup}
	// ErrCorrupt: the cluster's CORRUPT alarm is raised; the write was not applied (C19).
	ErrCorrupt = &Error{Code: CodeCorrupt}
)

// Strerror is xce_strerror: the text of any status or code, either sign.
func Strerror(code int) string {
	return C.GoString(C.xce_strerror(C.int(code)))
}

// Version is the library's version string.
func Version() string {
	return C.GoString(C.xce_version())
}

// NewJobID returns a job id unique across clients and restarts, for JobSpec.ID.
func NewJobID() uint64 {
	var id C.uint64_t
	C.xce_new_jobid(&id)
	return uint64(id)
}

// Config is xce_client_config_t: Masters in the "host:port,host:port" syntax; the TLS files
// are optional (a CA enables TLS).
type Config struct {
	Masters    string
	ClientName string
	TLSCA      string
	TLSCert    string
	TLSKey     string
}

// setFixed copies s into a C char array field, NUL-terminated.
func setFixed(dst []C.char, s string) error {
	if len(s) >= len(dst) {
		return ErrInvalid
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return ErrInvalid
		}
		dst[i] = C.char(s[i])
	}
	dst[len(s)] = 0
	return nil
}

// Client is one context (xcecli_ctx_t), safe for concurrent use by many goroutines: the
// library serialises the calls on it (F11); each call has its own cancellation and deadline.
type Client struct {
	// ctx is the library context; raw is set instead on the view a reconnect handler gets
	// (ops on it run directly on the reconnecting context, without locking or call handles).
	ctx C.xcecli_ctx_t
	raw C.xcecli_ctx_t

	mu     sync.Mutex
	idle   *sync.Cond // signalled when calls or locals drop to 0
	closed bool
	calls  int // ops in progress (on call handles)
	locals int // non-blocking calls on the context itself (setters, stats)

	hooks *hookState // reconnect and event handlers (hooks.go)
}

// Start creates a context and connects it to the first reachable master in list order (F2).
// If ctx ends before the connection is made, Start returns ctx's error at once and the
// connection being made is closed in the background.
func Start(ctx context.Context, cfg Config) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "start", Code: int(syscall.ECANCELED), Ctx: err}
	}
	conf := (*C.xce_client_config_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.xce_client_config_t{}))))
	C.xce_client_config_init(conf)
	list := C.CString(cfg.Masters)
	rc := C.xce_client_config_parse_masters(conf, list)
	C.free(unsafe.Pointer(list))
	if rc < 0 {
		C.free(unsafe.Pointer(conf))
		return nil, &Error{Op: "start", Code: int(-rc)}
	}
	for _, f := range []struct {
		dst []C.char
		s   string
	}{
		{conf.client_name[:], cfg.ClientName},
		{conf.tls_ca_file[:], cfg.TLSCA},
		{conf.tls_cert_file[:], cfg.TLSCert},
		{conf.tls_key_file[:], cfg.TLSKey},
	} {
		if err := setFixed(f.dst, f.s); err != nil {
			C.free(unsafe.Pointer(conf))
			return nil, &Error{Op: "start", Code: int(syscall.EINVAL)}
		}
	}
	type result struct {
		ctx C.xcecli_ctx_t
		rc  C.int
	}
	done := make(chan result, 1)
	abandoned := make(chan struct{})
	go func() {
		defer C.free(unsafe.Pointer(conf))
		var h C.xcecli_ctx_t
		rc := C.xcecli_start(conf, &h)
		select {
		case done <- result{h, rc}:
		case <-abandoned:
			if rc >= 0 {
				C.xcecli_stop(h)
			}
		}
	}()
	select {
	case r := <-done:
		if r.rc < 0 {
			return nil, &Error{Op: "start", Code: int(-r.rc)}
		}
		c := &Client{ctx: r.ctx}
		c.idle = sync.NewCond(&c.mu)
		return c, nil
	case <-ctx.Done():
		close(abandoned)
		// The result may have been sent just before: close what it made.
		select {
		case r := <-done:
			if r.rc >= 0 {
				C.xcecli_stop(r.ctx)
			}
		default:
		}
		return nil, &Error{Op: "start", Code: int(syscall.ECANCELED), Ctx: ctx.Err()}
	}
}

// ctxError is the error of a call that its context ended.
func ctxError(op string, ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded // past the deadline, before Go's timer fired
	}
	code := syscall.ECANCELED
	if errors.Is(err, context.DeadlineExceeded) {
		code = syscall.ETIMEDOUT
	}
	return &Error{Op: op, Code: int(code), Ctx: err}
}

// maxDeadlineMs is the longest per-call deadline the library takes (one day).
const maxDeadlineMs = 86_400_000

// deadlineMs is the call deadline of ctx in ms for the library (0: none). A deadline more than
// a day away is no library deadline (0): the watcher still cancels the call when it passes.
func deadlineMs(ctx context.Context) (int64, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, true
	}
	d := time.Until(dl)
	if d <= 0 {
		return 0, false
	}
	// Rounded up: the library's deadline must not fire before the context's (the call then
	// returns the context's error).
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms > maxDeadlineMs {
		return 0, true
	}
	return ms, true
}

// do runs one library call f for the op named op, on a per-call handle of c bound to ctx:
// ctx's deadline becomes the call's deadline, and cancelling ctx ends this call only. It
// returns f's non-negative result or the error.
func (c *Client) do(ctx context.Context, op string, f func(h C.xcecli_ctx_t) C.int) (int, error) {
	if c.raw != nil {
		// Inside a reconnect handler: single attempts on the reconnecting context (F10).
		rc := f(c.raw)
		if rc < 0 {
			return 0, &Error{Op: op, Code: int(-rc)}
		}
		return int(rc), nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		return 0, ctxError(op, ctx)
	}
	ms, ok := deadlineMs(ctx)
	if !ok {
		return 0, ctxError(op, ctx)
	}
	h, err := c.enter(op, ms)
	if err != nil {
		return 0, err
	}
	stop := c.watch(ctx, h)
	rc := f(C.xcecli_call_ctx(h))
	stop()
	closed := c.leave(h)
	if rc >= 0 {
		return int(rc), nil
	}
	switch {
	case closed && (rc == -C.ECANCELED || rc == -C.EINTR || rc == -CodeClosed):
		return 0, &Error{Op: op, Code: CodeClosed}
	case ended(ctx) && !definitive(int(-rc)):
		// Cancelled, or the deadline ended the call (as a timeout, a transport error or
		// "cluster not ready"): the context's error says why.
		return 0, ctxError(op, ctx)
	}
	return 0, &Error{Op: op, Code: int(-rc)}
}

// definitive: a status that is the op's own answer, not a consequence of the call being cut
// short.
func definitive(code int) bool {
	switch code {
	case int(C.ENOENT), int(C.EINVAL), int(C.EACCES), int(C.EEXIST), CodeDupJob, CodeAuth,
		CodeProto, CodeTLS, CodeInternal:
		return true
	}
	return false
}

// ended: ctx is done, or its deadline has passed (the library's deadline may fire a moment
// before Go's timer marks the context).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// check runs a call that returns only a status.
func (c *Client) check(ctx context.Context, op string, f func(h C.xcecli_ctx_t) C.int) error {
	_, err := c.do(ctx, op, f)
	return err
}

// Close ends the calls in progress and queued on c (they return ErrClosed), waits for them to
// leave the library, and frees the context (xcecli_stop). Calls made after Close return
// ErrClosed at once. The first Close returns nil, later ones ErrClosed.
func (c *Client) Close() error {
	if c.raw != nil {
		return &Error{Op: "close", Code: int(syscall.EINVAL)}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return &Error{Op: "close", Code: CodeClosed}
	}
	c.closed = true // no call begins on the context from here
	for c.locals > 0 {
		c.idle.Wait()
	}
	c.mu.Unlock()
	c.stop() // call.go: ends the calls in progress and queued, frees the context
	c.hooks.release()
	return nil
}

// RetryConfig is xce_retry_config_t.
type RetryConfig struct {
	MaxRetries        uint32
	InitialRetryMs    uint32
	MaxRetryMs        uint32
	BackoffMultiplier float64
}

// DefaultRetry is XCE_RETRY_DEFAULTS.
var DefaultRetry = RetryConfig{
	MaxRetries:        C.XCE_RETRY_DEFAULT_MAX_RETRIES,
	InitialRetryMs:    C.XCE_RETRY_DEFAULT_INITIAL_MS,
	MaxRetryMs:        C.XCE_RETRY_DEFAULT_MAX_MS,
	BackoffMultiplier: C.XCE_RETRY_DEFAULT_MULTIPLIER,
}

// SetRetry sets the retry policy for calls that start afterwards; nil restores the defaults.
func (c *Client) SetRetry(r *RetryConfig) error {
	return c.local("set_retry_config", func(h C.xcecli_ctx_t) C.int {
		if r == nil {
			return C.xcecli_set_retry_config(h, nil)
		}
		cr := C.xce_retry_config_t{
			max_retries:        C.uint32_t(r.MaxRetries),
			initial_retry_ms:   C.uint32_t(r.InitialRetryMs),
			max_retry_ms:       C.uint32_t(r.MaxRetryMs),
			backoff_multiplier: C.double(r.BackoffMultiplier),
		}
		return C.xcecli_set_retry_config(h, &cr)
	})
}

// Option is an XCE_OPT_* knob.
type Option int

// The knobs of SetOption.
const (
	OptConnectTimeoutMs Option = C.XCE_OPT_CONNECT_TIMEOUT_MS
	OptReplyTimeoutMs   Option = C.XCE_OPT_REPLY_TIMEOUT_MS
	OptDeadlineMs       Option = C.XCE_OPT_DEADLINE_MS
	OptRedirectPolicy   Option = C.XCE_OPT_REDIRECT_POLICY
	OptWaitPrimary      Option = C.XCE_OPT_WAIT_PRIMARY
	OptLearnMasters     Option = C.XCE_OPT_LEARN_MASTERS // F29: 1 (default) learn the members from the primary, 0 off
	OptForward          Option = C.XCE_OPT_FORWARD       // F28: 1 (default) a reachable standby forwards when the primary is unreachable, 0 off
)

// SetOption sets one knob (xcecli_set_option) for calls that start afterwards.
func (c *Client) SetOption(opt Option, value int64) error {
	return c.local("set_option", func(h C.xcecli_ctx_t) C.int {
		return C.xcecli_set_option(h, C.int(opt), C.int64_t(value))
	})
}

// local runs a non-blocking call on the context itself (setters, stats): no call handle.
func (c *Client) local(op string, f func(h C.xcecli_ctx_t) C.int) error {
	h := c.raw
	if h == nil {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return &Error{Op: op, Code: CodeClosed}
		}
		c.locals++
		h = c.ctx
		c.mu.Unlock()
		defer c.leaveLocal()
	}
	if rc := f(h); rc < 0 {
		return &Error{Op: op, Code: int(-rc)}
	}
	return nil
}

func (c *Client) leaveLocal() {
	c.mu.Lock()
	c.locals--
	if c.locals == 0 {
		c.idle.Broadcast()
	}
	c.mu.Unlock()
}

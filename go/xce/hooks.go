package xce

/*
#include <errno.h>
#include <stdint.h>
#include <xce/xce.h>
int xce_go_set_reconnect(xcecli_ctx_t ctx, uintptr_t h, int on);
int xce_go_set_event(xcecli_ctx_t ctx, uintptr_t h, int on);
int xce_go_set_log(int on);
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
)

// hookState holds a Client's Go handlers behind one cgo.Handle, registered with the library
// once and deleted after the context is stopped (the library never calls it again then).
type hookState struct {
	handle    cgo.Handle
	reconnect atomic.Value // ReconnectFunc
	event     atomic.Value // EventFunc
}

func (hs *hookState) release() {
	if hs != nil {
		hs.handle.Delete()
	}
}

// ReconnectFunc is a reconnect handler (F10). h is the reconnecting client as seen from inside
// the handler: ops on it run as single attempts on the new connection (typically Join), with
// no cancellation; it must not be kept after the handler returns, nor closed. A non-nil error
// fails the attempt, classified like a status a controller answered (F4): an *Error with
// ErrNotReady's code makes the call back off and try again, most other codes end the call
// with that error, and any other error ends it with EIO. When an op inside the handler fails
// on the transport (the new primary died too), the call moves on to the next master.
type ReconnectFunc func(h *Client) error

// EventKind is XCE_EVENT_*.
type EventKind int

// Event kinds (F17).
const (
	EventRotation         EventKind = C.XCE_EVENT_ROTATION
	EventFailoverStarted  EventKind = C.XCE_EVENT_FAILOVER_STARTED
	EventFailoverFinished EventKind = C.XCE_EVENT_FAILOVER_FINISHED
	EventNotReady         EventKind = C.XCE_EVENT_NOT_READY
)

func (k EventKind) String() string {
	switch k {
	case EventRotation:
		return "rotation"
	case EventFailoverStarted:
		return "failover-started"
	case EventFailoverFinished:
		return "failover-finished"
	case EventNotReady:
		return "not-ready"
	}
	return fmt.Sprintf("event-%d", int(k))
}

// Event is xce_event_t, copied.
type Event struct {
	Kind EventKind
	// Status that caused it (negative errno or -E_XCE_*; 0 when none).
	Status int
	// From: the master left ("host:port", ROTATION and FAILOVER_STARTED); To: the master
	// reached (ROTATION and FAILOVER_FINISHED).
	From, To string
	// Attempts made by the call (NOT_READY).
	Attempts uint32
	// Duration: of the failover (FAILOVER_FINISHED), of the call (NOT_READY).
	Duration time.Duration
}

// EventFunc receives events on the goroutine of the call that caused them, with the client's
// lock held: it may call Stats and LastError, but ops on the client fail (EDEADLK). It must
// not block for long.
type EventFunc func(Event)

// hookState returns c's hook state, creating and registering it on first use.
func (c *Client) hookState() (*hookState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.hooks == nil {
		c.hooks = &hookState{}
		c.hooks.handle = cgo.NewHandle(c.hooks)
	}
	return c.hooks, nil
}

// SetReconnectHandler sets (nil: removes) the function called after every successful
// reconnect, before the interrupted op is re-sent (F10) — the place to re-join:
//
//	c.SetReconnectHandler(func(h *xce.Client) error {
//		_, err := h.Join(context.Background(), spec)
//		return err
//	})
//
// It is not called for the first connection (Start): join once after Start as well.
func (c *Client) SetReconnectHandler(f ReconnectFunc) error {
	if c.raw != nil {
		return ErrInvalid
	}
	hs, err := c.hookState()
	if err != nil {
		return err
	}
	hs.reconnect.Store(f)
	on := C.int(0)
	if f != nil {
		on = 1
	}
	return c.local("set_reconnect_handler", func(h C.xcecli_ctx_t) C.int {
		return C.xce_go_set_reconnect(h, C.uintptr_t(hs.handle), on)
	})
}

// SetEventHandler sets (nil: removes) the client's event handler (F17).
func (c *Client) SetEventHandler(f EventFunc) error {
	if c.raw != nil {
		return ErrInvalid
	}
	hs, err := c.hookState()
	if err != nil {
		return err
	}
	hs.event.Store(f)
	on := C.int(0)
	if f != nil {
		on = 1
	}
	return c.local("set_event_handler", func(h C.xcecli_ctx_t) C.int {
		return C.xce_go_set_event(h, C.uintptr_t(hs.handle), on)
	})
}

//export xceGoReconnect
func xceGoReconnect(ctx C.xcecli_ctx_t, h C.uintptr_t) (rc C.int) {
	hs := cgo.Handle(h).Value().(*hookState)
	f, _ := hs.reconnect.Load().(ReconnectFunc)
	if f == nil {
		return 0
	}
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "xce: reconnect handler panicked: %v\n", p)
			rc = -CodeInternal
		}
	}()
	if err := f(&Client{raw: ctx}); err != nil {
		if xe, ok := err.(*Error); ok && xe.Code > 0 {
			return C.int(-xe.Code)
		}
		return -C.EIO
	}
	return 0
}

func endpoint(host *C.char, port C.uint16_t) string {
	if host == nil || port == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d", C.GoString(host), uint16(port))
}

//export xceGoEvent
func xceGoEvent(ev *C.xce_event_t, h C.uintptr_t) {
	hs := cgo.Handle(h).Value().(*hookState)
	f, _ := hs.event.Load().(EventFunc)
	if f == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "xce: event handler panicked: %v\n", p)
		}
	}()
	f(Event{Kind: EventKind(ev.kind), Status: int(ev.status),
		From: endpoint(ev.from_host, ev.from_port), To: endpoint(ev.to_host, ev.to_port),
		Attempts: uint32(ev.attempts), Duration: time.Duration(ev.duration_ms) * time.Millisecond})
}

// Log levels (XCE_LOG_*).
const (
	LogOff   = C.XCE_LOG_OFF
	LogError = C.XCE_LOG_ERROR
	LogWarn  = C.XCE_LOG_WARN
	LogInfo  = C.XCE_LOG_INFO
	LogDebug = C.XCE_LOG_DEBUG
)

// LogFunc receives one log line of the library (level LogError … LogDebug), on the goroutine
// whose call logged; it may be called from several goroutines at once.
type LogFunc func(level int, msg string)

var (
	logMu   sync.Mutex
	logSink atomic.Value // LogFunc
)

// SetLogHandler replaces the library's log sink for the whole process (F14); nil restores
// the default (stderr).
func SetLogHandler(f LogFunc) error {
	logMu.Lock()
	defer logMu.Unlock()
	logSink.Store(f)
	on := C.int(0)
	if f != nil {
		on = 1
	}
	if rc := C.xce_go_set_log(on); rc < 0 {
		return &Error{Op: "set_log_handler", Code: int(-rc)}
	}
	return nil
}

// SetLogLevel sets the library's log level for the whole process (overriding XCE_LOG) and
// returns the previous one.
func SetLogLevel(level int) (int, error) {
	rc := C.xce_set_log_level(C.int(level))
	if rc < 0 {
		return 0, &Error{Op: "set_log_level", Code: int(-rc)}
	}
	return int(rc), nil
}

//export xceGoLog
func xceGoLog(level C.int, msg *C.char) {
	f, _ := logSink.Load().(LogFunc)
	if f == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "xce: log handler panicked: %v\n", p)
		}
	}()
	f(int(level), C.GoString(msg))
}

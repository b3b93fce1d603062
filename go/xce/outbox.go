package xce

/*
#include <xce/xce.h>
*/
import "C"

import (
	"context"
	"time"
)

// Codes of the third round (the header's E_XCE_* values).
const (
	// CodeTooBig: a listing's reply is larger than the library accepts (E_XCE_TOOBIG).
	CodeTooBig = C.E_XCE_TOOBIG
	// CodeUnknown: a controller placed a write in its log and could not confirm it
	// (E_XCE_UNKNOWN). A call never returns it: it re-sends, then reports ErrNotReady with
	// maybe-applied set.
	CodeUnknown = C.E_XCE_UNKNOWN
	// CodeOutboxFull: a notification or heartbeat was not accepted (E_XCE_OUTBOX_FULL).
	CodeOutboxFull = C.E_XCE_OUTBOX_FULL
	// CodeNoSpace: the primary refused new work because its storage quota is reached
	// (E_XCE_NOSPACE, C24); reads and kills go on. Never retried.
	CodeNoSpace = C.E_XCE_NOSPACE
)

// OutboxMax is XCE_OUTBOX_MAX: most notifications and heartbeats waiting for a primary's
// acknowledgement.
const OutboxMax = C.XCE_OUTBOX_MAX

var (
	// ErrTooBig: a listing too large even paged.
	ErrTooBig = &Error{Code: CodeTooBig}
	// ErrOutboxFull: the notification was not accepted; Flush, then send it again.
	ErrOutboxFull = &Error{Code: CodeOutboxFull}
	// ErrNoSpace: the cluster refuses new work until space is freed (C24).
	ErrNoSpace = &Error{Code: CodeNoSpace}
)

// Flush waits until every notification and heartbeat accepted so far was acknowledged by a
// primary (F12), at most timeout (and ctx), failing over as needed. A timeout that passes
// first is syscall.ETIMEDOUT; the rest stay queued (OutboxDepth). Close drops what is still
// queued, so a daemon flushes first.
func (c *Client) Flush(ctx context.Context, timeout time.Duration) error {
	ms := timeout.Milliseconds()
	if ms < 0 {
		ms = 0
	}
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return c.check(ctx, "flush", func(h C.xcecli_ctx_t) C.int {
		return C.xcecli_flush(h, C.int(ms))
	})
}

// OutboxDepth is how many notifications and heartbeats wait for a primary's acknowledgement;
// it does not wait for a call in progress.
func (c *Client) OutboxDepth() (int, error) {
	var n C.int
	err := c.local("outbox_depth", func(h C.xcecli_ctx_t) C.int {
		n = C.xcecli_outbox_depth(h)
		return n
	})
	return int(n), err
}

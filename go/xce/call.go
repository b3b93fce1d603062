package xce

/*
#include <errno.h>
#include <xce/xce.h>
*/
import "C"

import (
	"context"
)

// Every op runs on a call handle of the context (xcecli_call_new; the op gets it as a context
// handle through xcecli_call_ctx — the two C types do not mix): its context.Context's
// deadline is the handle's deadline, and a watcher goroutine cancels the handle
// (xcecli_call_cancel) when the context ends, which ends that call only — in progress, queued
// behind other goroutines' calls, or not yet begun. Close stops the context (xcecli_stop):
// every call in progress or queued returns at once, later ones fail with ErrClosed.

// perCallHandles: calls run on per-call handles (cancellable one by one).
const perCallHandles = true

// enter creates the call's handle; registered so that Close waits for it to be released.
func (c *Client) enter(op string, deadlineMs int64) (C.xcecli_call_t, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &Error{Op: op, Code: CodeClosed}
	}
	var h C.xcecli_call_t
	if rc := C.xcecli_call_new(c.ctx, C.int64_t(deadlineMs), &h); rc < 0 {
		return nil, &Error{Op: op, Code: int(-rc)}
	}
	c.calls++
	return h, nil
}

// watch cancels the call on h when ctx ends. The returned stop must be called once the call
// has returned and before h is released: it waits for the watcher, so a cancel never races
// with xcecli_call_free.
func (c *Client) watch(ctx context.Context, h C.xcecli_call_t) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			C.xcecli_call_cancel(h)
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// leave releases the call's handle; true when the Client was closed meanwhile.
func (c *Client) leave(h C.xcecli_call_t) bool {
	C.xcecli_call_free(h)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls--
	if c.calls == 0 {
		c.idle.Broadcast()
	}
	return c.closed
}

// stop ends every call in progress or queued (they return -E_XCE_CLOSED), waits for those in
// flight and frees the context (xcecli_stop, safe while other threads are in calls). Call
// handles still held by returning calls stay valid until their xcecli_call_free (and a handle
// used after it is an error code, never freed memory: handles are checked values).
func (c *Client) stop() {
	C.xcecli_stop(c.ctx)
}

// C trampolines from libxce's callbacks into the Go handlers of hooks.go. The Go side passes
// a cgo.Handle as the callback's arg (a uintptr_t, never a Go pointer).
#include <stdint.h>
#include <xce/xce.h>
#include "_cgo_export.h"

static int reconnect_tramp(xcecli_ctx_t ctx, void *arg) {
	return xceGoReconnect(ctx, (uintptr_t)arg);
}

int xce_go_set_reconnect(xcecli_ctx_t ctx, uintptr_t h, int on) {
	return xcecli_set_reconnect_handler(ctx, on ? reconnect_tramp : NULL, (void *)h);
}

static void event_tramp(xcecli_ctx_t ctx, const xce_event_t *ev, void *arg) {
	(void)ctx;
	xceGoEvent((xce_event_t *)ev, (uintptr_t)arg);
}

int xce_go_set_event(xcecli_ctx_t ctx, uintptr_t h, int on) {
	return xcecli_set_event_handler(ctx, on ? event_tramp : NULL, (void *)h);
}

static void log_tramp(int level, const char *msg, void *arg) {
	(void)arg;
	xceGoLog(level, (char *)msg);
}

int xce_go_set_log(int on) {
	return xce_set_log_handler(on ? log_tramp : NULL, NULL);
}

/* Must NOT compile: xcecli_call_cancel takes a call handle. */
#include <xce/xce.h>
int f(xcecli_ctx_t ctx) { return xcecli_call_cancel(ctx); }

/* Must NOT compile: a context handle is not a call handle (F20 amended). */
#include <xce/xce.h>
void f(xcecli_ctx_t ctx) { xcecli_call_free(ctx); }

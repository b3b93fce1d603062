/* Must NOT compile: a call handle is not a context handle (F20 amended). */
#include <xce/xce.h>
void f(xcecli_call_t call) { xcecli_stop(call); }

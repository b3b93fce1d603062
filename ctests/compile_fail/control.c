/* Must compile: the right handle for each function (the control of compile_fail.sh). */
#include <xce/xce.h>
void f(xcecli_ctx_t ctx, xcecli_call_t call) {
    xce_controller_info_t *info = 0;
    (void)xcecli_hello(xcecli_call_ctx(call), &info);
    (void)xcecli_call_cancel(call);
    xcecli_call_free(call);
    xcecli_stop(ctx);
}

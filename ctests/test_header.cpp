// The header compiles as C++17 with -Wall -Wextra -Wpedantic -Werror (meson's warning_level=3
// and werror), links, and its initializers work in C++.
#include <xce/xce.h>

#include <cstdio>
#include <cstring>

int main() {
    xce_retry_config_t r = XCE_RETRY_DEFAULTS;
    xce_client_config_t conf;
    if (xce_client_config_init(&conf) != 0) return 1;
    if (xce_client_config_parse_masters(&conf, "a:1,b:2") != 2) return 1;
    if (r.max_retries != XCE_RETRY_DEFAULT_MAX_RETRIES) return 1;
    if (std::strcmp(xce_strerror(-E_XCE_NOT_READY), "cluster not ready") != 0) return 1;
    xcecli_ctx_t ctx = nullptr;
    xcecli_stop(ctx);
    std::printf("C++17 header ok (libxce %s)\n", xce_version());
    return 0;
}

/* The header compiles as strict C11 (-std=c11, not gnu11) with -Wall -Wextra -Wpedantic
 * -Werror, alone and twice (include guard). */
#include <xce/xce.h>
#include <xce/xce.h>

#include <stdio.h>

_Static_assert(sizeof(xce_retry_config_t) == 3 * sizeof(uint32_t) + 4 + sizeof(double),
               "xce_retry_config_t layout");
_Static_assert(N_MAX_MASTERS == 8 && XCE_N_MAX_MASTERS == N_MAX_MASTERS && XCE_MAXHOSTNAME_LEN == 256,
               "limits of c-api.md");

int main(void) {
    xce_retry_config_t r = XCE_RETRY_DEFAULTS;
    printf("C11 header ok (max_retries %u)\n", r.max_retries);
    return 0;
}

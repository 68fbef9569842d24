/* KJIT_SPIN_US (src/core/spin.c): a valid value is taken as it is; an
 * empty, non-numeric, negative, too large or partly numeric one is ignored
 * for the default, which is 0 on hosts with fewer than 4 CPUs. */
#include <stdlib.h>
#include <unistd.h>

#include "core/spin.h"
#include "test_util.h"

int main(void)
{
    const int dflt = sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? 250 : 0;
    unsetenv("KJIT_SPIN_US");
    CHECK_EQ_INT(kjit__spin_us(250), dflt);
    static const struct { const char *v; int want; } cases[] = {
        {"0", 0}, {"1", 1}, {"500", 500}, {"1000000", 1000000},
        {"", -1}, {"abc", -1}, {"-1", -1}, {"1000001", -1}, {"12us", -1}, {" 5", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        setenv("KJIT_SPIN_US", cases[i].v, 1);
        CHECK_EQ_INT(kjit__spin_us(250), cases[i].want < 0 ? dflt : cases[i].want);
    }
    unsetenv("KJIT_SPIN_US");
    /* The clock moves forward. */
    const double a = kjit__now_us(), b = kjit__now_us();
    CHECK(a > 0 && b >= a);
    return kjit_test_result("test_spin");
}

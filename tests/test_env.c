/* The environment's on/off switches (src/core/env.c): every spelling of on
 * and off, in any case; unset or empty gives the default; anything else is
 * refused by name, and kjit_ctx_create refuses a context while one of its
 * switches (KJIT_TUNE, KJIT_PDL, KJIT_LINEINFO, KJIT_PART_SMALL) holds
 * such a value, so that "false" never turns a feature on. */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "kjit.h"
#include "test_util.h"

int main(void)
{
    static const struct { const char *v; int want; } cases[] = {
        {"1", 1}, {"true", 1}, {"TRUE", 1}, {"Yes", 1}, {"on", 1},
        {"0", 0}, {"false", 0}, {"False", 0}, {"NO", 0}, {"off", 0},
        {"2", -1}, {"maybe", -1}, {" 1", -1}, {"1 ", -1}, {"onn", -1}, {"-1", -1}, {"enable", -1},
    };
    unsetenv("KJIT_TEST_SWITCH");
    for (int dflt = 0; dflt <= 1; ++dflt) {
        int on = 7;
        CHECK_EQ_INT(kjit__env_switch_parse("KJIT_TEST_SWITCH", dflt, &on), 0);
        CHECK_EQ_INT(on, dflt);
        setenv("KJIT_TEST_SWITCH", "", 1);
        on = 7;
        CHECK_EQ_INT(kjit__env_switch_parse("KJIT_TEST_SWITCH", dflt, &on), 0);
        CHECK_EQ_INT(on, dflt);
        unsetenv("KJIT_TEST_SWITCH");
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        setenv("KJIT_TEST_SWITCH", cases[i].v, 1);
        int on = 7;
        const int rc = kjit__env_switch("KJIT_TEST_SWITCH", 1 - (cases[i].want == 1), &on);
        if (cases[i].want < 0) {
            CHECK_EQ_INT(rc, KJIT_EINVAL);
            CHECK_EQ_INT(on, 7);
            CHECK(strstr(kjit_last_error(), "KJIT_TEST_SWITCH") && strstr(kjit_last_error(), cases[i].v));
        } else {
            CHECK_EQ_INT(rc, KJIT_OK);
            CHECK_EQ_INT(on, cases[i].want);
        }
    }
    unsetenv("KJIT_TEST_SWITCH");

    /* A context with each of its switches at a value that is not one. */
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.device = KJIT_NO_DEVICE;
    o.cache_dir = "";
    static const char *const names[] = {"KJIT_TUNE", "KJIT_PDL", "KJIT_LINEINFO", "KJIT_PART_SMALL"};
    for (int i = 0; i < 4; ++i) {
        kjit_ctx *ctx = (kjit_ctx *)&o; /* must come back NULL */
        setenv(names[i], "false", 1);
        CHECK_EQ_INT(kjit_ctx_create(&ctx, &o), KJIT_OK);
        kjit_ctx_destroy(ctx);
        setenv(names[i], "maybe", 1);
        ctx = (kjit_ctx *)&o;
        CHECK_EQ_INT(kjit_ctx_create(&ctx, &o), KJIT_EINVAL);
        CHECK(ctx == NULL);
        CHECK(strstr(kjit_last_error(), names[i]) && strstr(kjit_last_error(), "'maybe'"));
        unsetenv(names[i]);
    }
    return kjit_test_result("test_env");
}

/* libFuzzer target: the tuning file's reader on arbitrary bytes. A text it
 * reads (OK) holds only valid entries of this version, no key twice; what a
 * save would write from them (kjit__tune_print) reads back to the same
 * entries and the same other versions' texts, and prints again to the same
 * text. Any other state reads no entry and says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tune/tune_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kjit_tune_list l = {0}, m = {0};
    int bad = 0, bad2 = 0;
    char why[256] = "";
    const kjit_tune_file_state st = kjit__tune_parse((const char *)data, size, &l, &bad, why, sizeof why);
    if (st != KJIT_TUNE_FILE_OK) {
        if (l.n || l.n_other || !why[0]) abort();
        kjit__tune_list_free(&l);
        return 0;
    }
    for (size_t i = 0; i < l.n; ++i) {
        if (kjit__tune_entry_check(&l.v[i], NULL, 0)) abort();
        for (size_t j = 0; j < i; ++j)
            if (kjit__tune_entry_same_key(&l.v[i], &l.v[j])) abort();
    }
    char *text = kjit__tune_print(&l);
    if (!text) abort();
    if (kjit__tune_parse(text, strlen(text), &m, &bad2, NULL, 0) != KJIT_TUNE_FILE_OK || bad2 || m.n != l.n ||
        m.n_other != l.n_other)
        abort();
    for (size_t i = 0; i < l.n; ++i)
        if (!kjit__tune_entry_same_key(&l.v[i], &m.v[i]) || !kjit__adaln_config_equal(&l.v[i].cfg, &m.v[i].cfg))
            abort();
    for (size_t i = 0; i < l.n_other; ++i)
        if (strcmp(l.other[i], m.other[i])) abort();
    char *again = kjit__tune_print(&m);
    if (!again || strcmp(text, again)) abort();
    free(again);
    free(text);
    kjit__tune_list_free(&m);
    kjit__tune_list_free(&l);
    return 0;
}

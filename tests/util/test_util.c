#include "test_util.h"

#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

int kjit_test_failures;

int kjit_test_result(const char *name)
{
    if (kjit_test_failures) {
        fprintf(stderr, "%s: %d check(s) FAILED\n", name, kjit_test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

char *kjit_test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/kjit-test-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

void kjit_test_rmtree(const char *path)
{
    if (path) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

uint64_t kjit_test_seed(const char *name)
{
    const char *e = getenv("KJIT_TEST_SEED");
    uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("%s: seed %llu (KJIT_TEST_SEED to replay)\n", name, (unsigned long long)s);
    return s;
}

void kjit_test_child_exit(int w, int ok)
{
    const char c = ok ? '1' : '0';
    _exit(write(w, &c, 1) == 1 ? 0 : 2);
}

int kjit_test_child_passed(int pid, int r, int w)
{
    close(w);
    char c = '0';
    const int got = pid > 0 && read(r, &c, 1) == 1;
    close(r);
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    return got && c == '1' && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}


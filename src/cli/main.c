#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "kjit.h"

static const char usage[] =
    "usage: kjit <command> [options]\n"
    "\n"
    "Runtime-compiled CUDA kernels for AdaLN ops (version " KJIT_VERSION_STRING ").\n"
    "\n"
    "commands:\n"
    "  info      versions of kjit, NVRTC and the driver; archs; GPUs\n"
    "  prewarm   compile ops ahead of time into the cache (no GPU needed)\n"
    "  cache     stats | ls | verify | clear the on-disk cubin cache\n"
    "  serve     the node-local JIT service on a Unix socket\n"
    "  call      send one request to a running server, print the reply\n"
    "  tune      time the AdaLN ops' launch configs on this GPU, store the fastest\n"
    "\n"
    "kjit <command> --help (or kjit help <command>) shows each command's options;\n"
    "kjit --version prints the version.\n";

/* A report lost on the way out (a full disk, a closed pipe, /dev/full) is a
 * failure: the caller must not read a missing or cut --json as success. */
static int finish(int rc)
{
    if (kjit_cli_json_lost() && !rc) {
        fputs("kjit: out of memory for the JSON answer\n", stderr); /* the --json failure's line on stderr */
        rc = KJIT_EXIT_FAIL;
    }
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kjit: cannot write the output to stdout%s%s\n", errno ? ": " : "", errno ? strerror(errno) : "");
        return rc ? rc : KJIT_EXIT_FAIL;
    }
    return rc;
}

static int run(int argc, char **argv);

static const struct {
    const char *name;
    int (*fn)(int, char **);
} cmds[] = {
    {"info", kjit_cli_info}, {"prewarm", kjit_cli_prewarm}, {"cache", kjit_cli_cache},
    {"serve", kjit_cli_serve}, {"call", kjit_cli_call},
    {"tune", kjit_cli_tune},
};

/* The command named name, or NULL. */
static int (*command(const char *name))(int, char **)
{
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; ++i)
        if (!strcmp(name, cmds[i].name)) return cmds[i].fn;
    return NULL;
}

int main(int argc, char **argv)
{
    /* Past a file-size limit (ulimit -f) a write fails with EFBIG, which a
     * prewarm reports as a kernel not stored, instead of the signal ending
     * the process with no report. */
    signal(SIGXFSZ, SIG_IGN);
    kjit_cli_json_hooks();
    return finish(run(argc, argv));
}

static int run(int argc, char **argv)
{
    /* `kjit --help CMD` / `kjit -h CMD`: as `kjit help CMD`. */
    static char help_word[] = "help";
    if (argc >= 3 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) argv[1] = help_word;
    if (argc > 3 && !strcmp(argv[1], "help")) {
        fprintf(stderr, "kjit help: one command at most, got '%s' after '%s'\n", argv[3], argv[2]);
        return KJIT_EXIT_USAGE;
    }
    /* `kjit help CMD` is `kjit CMD --help`, for a command only. */
    static char help_opt[] = "--help";
    char *help_argv[] = {argv[0], argc > 2 ? argv[2] : NULL, help_opt, NULL};
    if (argc == 3 && !strcmp(argv[1], "help")) {
        if (!command(argv[2]) && strcmp(argv[2], "--help") && strcmp(argv[2], "-h") && strcmp(argv[2], "help")) {
            fprintf(stderr, "kjit help: unknown command '%s'\n\n%s", argv[2], usage);
            return KJIT_EXIT_USAGE;
        }
        argv = help_argv;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? KJIT_EXIT_USAGE : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        if (argc > 2) {
            fprintf(stderr, "kjit --version: takes no arguments, got '%s'\n", argv[2]);
            return KJIT_EXIT_USAGE;
        }
        printf("kjit %s\n", KJIT_VERSION_STRING);
        return 0;
    }
    int (*fn)(int, char **) = command(argv[1]);
    if (fn) return fn(argc - 1, argv + 1);
    fprintf(stderr, "kjit: unknown %s '%s'\n\n%s", argv[1][0] == '-' ? "option" : "command", argv[1], usage);
    return KJIT_EXIT_USAGE;
}

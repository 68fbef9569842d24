#include "fork_gen.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_uint forks;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* In the child, right after fork: one atomic add, nothing else. */
static void in_child(void) { atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed); }

static void watch(void) { (void)pthread_atfork(NULL, NULL, in_child); }

void kjit__fork_watch(void) { pthread_once(&once, watch); }

unsigned kjit__fork_gen(void) { return atomic_load_explicit(&forks, memory_order_relaxed); }

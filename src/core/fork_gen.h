/* Forks of this process, counted in each child: a context records the
 * count when it is made, and a later call that finds another count runs in
 * a forked child, where the context is not to be used (kjit.h). */
#ifndef KJIT_FORK_GEN_H
#define KJIT_FORK_GEN_H

/* Starts the count (once per process; the first context does it). */
void kjit__fork_watch(void);
/* How many forks lie between the process that started the count and this
 * one: 0 there, 1 in its child, 2 in a grandchild. */
unsigned kjit__fork_gen(void);

#endif

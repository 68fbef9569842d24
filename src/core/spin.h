/* Polling instead of sleeping, for the run path of the server and the C
 * client: the clock and how long to poll. */
#ifndef KJIT_SPIN_H
#define KJIT_SPIN_H

/* CLOCK_MONOTONIC in microseconds. */
double kjit__now_us(void);
/* KJIT_SPIN_US when set (0 = never poll), else dflt on hosts with 4 or more
 * CPUs and 0 on smaller ones (there the poller would take the CPU that the
 * thread it waits for needs). */
int kjit__spin_us(int dflt);

#endif

/* Settings from the environment. On/off switches (KJIT_TUNE, KJIT_PDL,
 * KJIT_LINEINFO, KJIT_PART_SMALL, KJIT_RUN_GRAPH, KJIT_LOG): one spelling
 * rule for all, so that "false" never turns a feature on; whole numbers
 * (KJIT_CACHE_MAX_MB, KJIT_CACHE_LOCK_WAIT_S, KJIT_SERVE_MEMO_MAX): digits
 * only, in range. */
#ifndef KJIT_CORE_ENV_H
#define KJIT_CORE_ENV_H

/* name's value as a switch: 1, true, yes, on -> 1; 0, false, no, off -> 0
 * (any case); unset or empty -> dflt. 0 with *on set, or -1 for anything
 * else (*on untouched). */
int kjit__env_switch_parse(const char *name, int dflt, int *on);

/* name as a whole number in [lo, hi]: 1 and *out set, 0 when unset or
 * empty, -1 when it is something else (the caller names it). */
int kjit__env_whole(const char *name, unsigned long long lo, unsigned long long hi, unsigned long long *out);

/* kjit__env_switch_parse, with a message naming the variable and its value
 * when it is not a switch: KJIT_OK or KJIT_EINVAL (kjit_last_error). */
int kjit__env_switch(const char *name, int dflt, int *on);

/* Every switch read when a context is created (KJIT_TUNE, KJIT_PDL,
 * KJIT_LINEINFO, KJIT_PART_SMALL): KJIT_OK, or KJIT_EINVAL naming the
 * first that is set to something else. */
int kjit__env_switches_check(void);

#endif

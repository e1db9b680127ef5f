/* Hunting instrumentation for lost wake-ups (cmake -DWEFT_HUNT=ON). In a
 * normal build every macro here compiles to nothing (WEFT_HUNT_PARK(ns) is
 * |ns|, WEFT_HUNT_DROP(...) is false): no call, no load, no branch.
 *
 * A hunting build uses these variables (read once per process by core/config.c;
 * docs/configuration.md):
 *   WEFT_CHAOS=N          at every hunt point, with probability 1/N, yield,
 *                         spin or sleep (1..300 us)
 *   WEFT_DELAY_SITE=S     sleep WEFT_DELAY_US (default 1000) at site S, one
 *   WEFT_DELAY_US=U       time in WEFT_DELAY_P (default 1: every time)
 *   WEFT_DELAY_P=P
 *   WEFT_PARK_MS=M        the timed parks of the scheduler, the combining
 *                         thread and the pool last M ms instead of 100 (a
 *                         huge M turns a lost wake-up into a hang); the grace
 *                         park that tells a late wake-up from a lost one
 *                         (sync.h) keeps its 100 ms
 *   WEFT_HUNT_DROP=W[:N]  drop every Nth (default: every) notification of
 *                         kind W that would have woken a parked thread:
 *                         ready (the pool's ready queue), progress (the pool
 *                         to the scheduler) or inbox (a command to the
 *                         scheduler thread)
 *   WEFT_HUNT_VERBOSE=1   at exit, print how often each site fired and how
 *                         many notifications were dropped
 *
 * Sites (the windows the review found; docs/architecture.md, "Hunting"):
 *    1  2  event count: between the epoch load, the sleepers increment, the fence
 *    3     event count: after the recheck, before the futex wait
 *    4  5  event count notify: before the fence; between the epoch bump and the wake
 *    6  7  notify_one: the same
 *    8     signal: between the flag and the notify
 *    9     token: between done and the futex wake
 *   10 11  inbox push: before the CAS; between the CAS and the notify
 *   20 21  ready queue push: after the slot is claimed; after it is published
 *   22     pool leaving a stream: between publishing IDLE and raising progress
 *   23     pool leaving a stream: after the raise, before the inbox recheck
 *   24     pool blocking a stream: between BLOCKED and the origin's cursor load
 *   25 26  pool completing a task: after the cursor; after the notifications
 *   27     pool: a stream taken, before passing the wake-up on
 *   28 29  pool: while looking for a ready stream; before parking
 *   30     stream submit: between the inbox push and the state check
 *   40     scheduler thread: before parking
 *   41 42  combining: after releasing the role (client pass; combining thread)
 *   43     combining: between the quiet push and the role check
 *   44     combining: between a client's inbox pass and its idle-stream flush
 *   45     retirement: between lowering the pending count and waking the room
 *   46     back-pressure: before parking */
#ifndef WEFT_CORE_HUNT_H
#define WEFT_CORE_HUNT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Notification kinds WEFT_HUNT_DROP can drop. */
enum { WEFT_HUNT_READY = 1, WEFT_HUNT_PROGRESS, WEFT_HUNT_INBOX };

#ifdef WEFT_HUNT
void weft__hunt_point(int site);
uint64_t weft__hunt_park_ns(uint64_t dflt);
/* True when the notification of |kind| about to wake a sleeper of |sleepers|
 * is to be dropped (counted in weft__hunt_dropped). */
bool weft__hunt_drop(int kind, _Atomic uint32_t *sleepers);
extern _Atomic uint64_t weft__hunt_hits[64];
extern _Atomic uint64_t weft__hunt_dropped;
#define WEFT_HUNT_POINT(site)          weft__hunt_point(site)
#define WEFT_HUNT_PARK(ns)             weft__hunt_park_ns(ns)
#define WEFT_HUNT_DROP(kind, sleepers) weft__hunt_drop((kind), (sleepers))
#else
#define WEFT_HUNT_POINT(site)          ((void)0)
#define WEFT_HUNT_PARK(ns)             (ns)
#define WEFT_HUNT_DROP(kind, sleepers) false
#endif

#endif

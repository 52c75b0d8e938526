/* test_timers.c - the timer wheel. White-box: a zeroed struct hd_shard driven with simulated
 * time through hd_wheel_expire (thousands of random delays from 0 ms to beyond the wheel's
 * 64^4 ms span, random time steps, stop and re-arm from outside and inside callbacks), checked
 * against a model: each arming fires exactly once, never early, in the first expiry pass that
 * reaches it; hd_wheel_next_ms never overshoots. Black-box: timers on a real shard fire in
 * expiry order, not before the clock reaches them, and stopped ones never fire. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hd_impl.h"

/* ---------------------------------------------------------------- simulation */

#define SIM_T0     UINT64_C(987654321987) /* large and odd: slots do not start aligned */
#define SIM_SPAN   (UINT64_C(1) << 24)    /* 64^4 ms: the wheel's reach before parking */
#define SIM_TIMERS 2000

struct sim_timer {
    struct hd_timer t;
    unsigned id;
    bool armed;              /* the model: armed and not fired or stopped since */
    uint64_t expiry;         /* the model's expiry of the current arming */
    uint64_t bound;          /* latest time next_ms may point at for it (see model_arm) */
    uint64_t eligible;       /* first expire call that may fire it (the one after arming) */
    unsigned fires;          /* total over all armings */
    unsigned armings;        /* total armings (starts and re-arms) */
    struct sim_timer *buddy; /* a timer this one's callback acts upon (targeted tests) */
    int buddy_action;        /* 0 none, 1 stop the buddy, 2 re-arm the buddy */
    uint64_t buddy_delay;
};

struct sim {
    struct hd_shard *s;
    uint64_t call;     /* number of the expire call running or last run */
    uint64_t now;      /* now of that call */
    uint64_t prev_now; /* now of the call before it */
    uint64_t rng;
    uint64_t model_armed;
    uint64_t total_fires;
    bool in_expire;
    bool rearm_in_callbacks; /* random test: callbacks re-arm themselves */
    bool touch_others;       /* random test: callbacks stop/re-arm other timers */
    bool stop_rearming;      /* wind-down: no more re-arms */
    bool strict_due;         /* next_ms must be 0 for any expiry <= now, bound or not */
    uint64_t min_cache;      /* min expiry over armed timers, UINT64_MAX if none; 0 = stale */
    struct sim_timer *timers;
    unsigned count;
};

static struct sim sim;

static uint64_t rnd(void)
{
    /* xorshift64*: fixed seed, so every run exercises the same schedule */
    sim.rng ^= sim.rng >> 12;
    sim.rng ^= sim.rng << 25;
    sim.rng ^= sim.rng >> 27;
    return sim.rng * UINT64_C(2685821657736338717);
}

static uint64_t rnd_below(uint64_t n)
{
    return rnd() % n;
}

static const uint64_t special_delays[] = {
    0,       1,       2,      63,       64,       65,       4095,     4096,     4097,
    262143,  262144,  262145, 16777215, 16777216, 16777217, 33554431, 33554432, 33554433,
    5000000, 8388608, 1000,   127,      128,      129,      8191,     8192,     8193,
};

/* A delay spread over every level: log-uniform up to 2^25 ms, sometimes far beyond 64^4. */
static uint64_t rnd_delay(bool allow_zero)
{
    uint64_t r = rnd_below(100);
    uint64_t d;
    if (r < 10) {
        d = special_delays[rnd_below(HD_ARRAY_SIZE(special_delays))];
    } else if (r < 97) {
        unsigned bits = (unsigned)rnd_below(26);
        d = bits ? rnd_below(UINT64_C(1) << bits) : 0;
    } else {
        d = SIM_SPAN + rnd_below(3 * SIM_SPAN); /* parked beyond the top level */
    }
    if (d == 0 && !allow_zero)
        d = 1;
    return d;
}

static void model_arm(struct sim_timer *st, uint64_t delay)
{
    if (!st->armed)
        sim.model_armed++;
    else if (st->bound == sim.min_cache)
        sim.min_cache = 0; /* its old time was the minimum: recompute */
    st->armed = true;
    st->armings++;
    st->expiry = sim.s->now_ms + delay;
    /* Armed for a time the wheel has already processed (delay 0 from a callback, or at the
     * wheel's start time): the wheel files it for the next millisecond. Whether next_ms must
     * then say 0 is wheel_next_ms_zero_when_due's question; the random runs accept +1 here. */
    uint64_t cur = sim.s->wheel.current_ms;
    st->bound = st->expiry > cur ? st->expiry : cur + 1;
    /* Armed inside call k or between calls k and k+1: call k+1 is the first that may fire it. */
    st->eligible = sim.call + 1;
    if (sim.min_cache != 0 && st->bound < sim.min_cache)
        sim.min_cache = st->bound;
    hd_timer_start(sim.s, &st->t, delay);
    cr_assert(hd_timer_armed(&st->t));
}

static void model_stop(struct sim_timer *st)
{
    if (st->armed) {
        sim.model_armed--;
        if (st->bound == sim.min_cache)
            sim.min_cache = 0;
    }
    st->armed = false;
    hd_timer_stop(sim.s, &st->t);
    cr_assert(!hd_timer_armed(&st->t));
}

/* The earliest time any armed timer is due (by its bound). */
static uint64_t model_min_expiry(void)
{
    if (sim.min_cache != 0)
        return sim.min_cache;
    uint64_t m = UINT64_MAX;
    for (unsigned i = 0; i < sim.count; i++)
        if (sim.timers[i].armed && sim.timers[i].bound < m)
            m = sim.timers[i].bound;
    sim.min_cache = m;
    return m;
}

static void sim_fire(struct hd_timer *t)
{
    struct sim_timer *st = hd_container_of(t, struct sim_timer, t);
    cr_assert(sim.in_expire, "timer %u fired outside hd_wheel_expire", st->id);
    cr_assert(st->armed, "timer %u fired while not armed (stopped or fired already)", st->id);
    cr_assert_geq(sim.now, st->expiry, "timer %u fired early: now %llu < expiry %llu", st->id,
                  (unsigned long long)sim.now, (unsigned long long)st->expiry);
    cr_assert_geq(sim.call, st->eligible, "timer %u fired in the pass that armed it", st->id);
    cr_assert(sim.call == st->eligible || sim.prev_now < st->expiry,
              "timer %u fired late: expiry %llu, previous pass already at %llu", st->id,
              (unsigned long long)st->expiry, (unsigned long long)sim.prev_now);
    cr_assert(!hd_timer_armed(t), "timer %u still linked while its callback runs", st->id);
    st->armed = false;
    st->fires++;
    sim.model_armed--;
    sim.total_fires++;
    if (st->bound == sim.min_cache)
        sim.min_cache = 0;

    if (st->buddy_action == 1)
        model_stop(st->buddy);
    else if (st->buddy_action == 2)
        model_arm(st->buddy, st->buddy_delay);
    st->buddy_action = 0;

    if (sim.stop_rearming)
        return;
    if (sim.touch_others && rnd_below(100) < 20) {
        struct sim_timer *o = &sim.timers[rnd_below(sim.count)];
        if (o != st) {
            if (rnd_below(2))
                model_stop(o);
            else
                model_arm(o, rnd_delay(false));
        }
    }
    if (sim.rearm_in_callbacks && rnd_below(100) < 30)
        model_arm(st, rnd_delay(false) % 65536 + 1);
}

/* The model's invariants that hold between passes: the wheel's count, next_ms's bound. */
static void sim_check_between(void)
{
    cr_assert_eq(sim.s->wheel.armed, sim.model_armed, "wheel counts %llu armed, model %llu",
                 (unsigned long long)sim.s->wheel.armed, (unsigned long long)sim.model_armed);
    uint64_t now = sim.s->now_ms;
    uint64_t next = hd_wheel_next_ms(&sim.s->wheel, now);
    uint64_t min = model_min_expiry();
    for (unsigned i = 0; sim.strict_due && i < sim.count; i++)
        if (sim.timers[i].armed && sim.timers[i].expiry < min)
            min = sim.timers[i].expiry;
    if (min == UINT64_MAX) {
        cr_assert_eq(next, UINT64_MAX, "nothing armed but next_ms = %llu",
                     (unsigned long long)next);
        return;
    }
    if (min <= now)
        cr_assert_eq(next, 0, "a timer is due (expiry %llu <= now %llu) but next_ms = %llu",
                     (unsigned long long)min, (unsigned long long)now, (unsigned long long)next);
    else
        cr_assert_leq(next, min - now, "next_ms %llu overshoots the next expiry (in %llu ms)",
                      (unsigned long long)next, (unsigned long long)(min - now));
}

static void sim_expire(uint64_t t)
{
    cr_assert_gt(t, sim.now);
    sim.prev_now = sim.now;
    sim.now = t;
    sim.call++;
    sim.s->now_ms = t;
    sim.in_expire = true;
    hd_wheel_expire(sim.s, t);
    sim.in_expire = false;
    sim_check_between();
}

/* Between passes the shard's tick time may be ahead of the wheel (tasks and bus handlers run
 * before the tick's expiry pass): move now_ms first, like a tick does. */
static void sim_advance_now(uint64_t t)
{
    sim.s->now_ms = t;
}

static void sim_setup(unsigned count)
{
    memset(&sim, 0, sizeof(sim));
    sim.rng = UINT64_C(0x9e3779b97f4a7c15);
    sim.s = calloc(1, sizeof(struct hd_shard));
    cr_assert(sim.s);
    sim.timers = calloc(count, sizeof(*sim.timers));
    cr_assert(sim.timers);
    sim.count = count;
    sim.now = SIM_T0;
    sim.prev_now = SIM_T0;
    sim.s->now_ms = SIM_T0;
    sim.min_cache = UINT64_MAX;
    hd_wheel_init(&sim.s->wheel, SIM_T0);
    for (unsigned i = 0; i < count; i++) {
        hd_timer_init(&sim.timers[i].t, sim_fire);
        sim.timers[i].id = i;
    }
}

static void sim_teardown(void)
{
    free(sim.timers);
    free(sim.s);
}

/* A random step: mostly small, sometimes seconds, sometimes landing right at (or one ms around)
 * the next expiry, sometimes a long sleep straight past it. */
static uint64_t sim_step(void)
{
    uint64_t r = rnd_below(100);
    uint64_t min = model_min_expiry();
    if (r < 8 && min != UINT64_MAX && min > sim.now + 1)
        return min - sim.now - 1 + rnd_below(3); /* expiry - 1, expiry, expiry + 1 */
    if (r < 10 && min != UINT64_MAX && min > sim.now)
        return min - sim.now + rnd_below(UINT64_C(1) << 22); /* overslept */
    if (r < 50)
        return 1 + rnd_below(16);
    if (r < 80)
        return 17 + rnd_below(2000);
    return 2000 + rnd_below(8000);
}

/* Ends when everything fired: every arming fired exactly once (checked at each fire). */
static void sim_wind_down(void)
{
    sim.stop_rearming = true;
    unsigned guard = 0;
    while (sim.model_armed > 0) {
        uint64_t min = model_min_expiry();
        uint64_t step = sim_step();
        /* Far from anything: jump most of the way (a shard that slept for hours). */
        if (min - sim.now > 20000 && rnd_below(4) == 0)
            step = (min - sim.now) - rnd_below(10000);
        sim_expire(sim.now + step);
        cr_assert_lt(++guard, 2000000u, "wind-down does not converge");
    }
    struct hd_wheel *w = &sim.s->wheel;
    cr_assert_eq(w->armed, 0);
    cr_assert_eq(hd_wheel_next_ms(w, sim.now), UINT64_MAX);
    for (unsigned l = 0; l < HD_WHEEL_LEVELS; l++) {
        cr_assert_eq(w->occupied[l], 0, "level %u bitmap not empty", l);
        for (unsigned i = 0; i < HD_WHEEL_SLOTS; i++)
            cr_assert_null(w->slots[l][i], "slot %u/%u not empty", l, i);
    }
    for (unsigned i = 0; i < sim.count; i++)
        cr_assert_leq(sim.timers[i].fires, sim.timers[i].armings);
    cr_assert_eq(sim.s->stats.timers_fired, sim.total_fires);
}

static void sim_random(bool touch_others)
{
    sim_setup(SIM_TIMERS);
    sim.rearm_in_callbacks = true;
    sim.touch_others = touch_others;
    /* Start everything at T0 with every special delay, then random ones. */
    for (unsigned i = 0; i < sim.count; i++) {
        uint64_t d = i < HD_ARRAY_SIZE(special_delays) ? special_delays[i] : rnd_delay(true);
        model_arm(&sim.timers[i], d);
    }
    sim_check_between();
    for (unsigned round = 0; round < 60000; round++) {
        uint64_t t = sim.now + sim_step();
        sim_advance_now(t);
        unsigned ops = (unsigned)rnd_below(4);
        for (unsigned k = 0; k < ops; k++) {
            struct sim_timer *st = &sim.timers[rnd_below(sim.count)];
            uint64_t r = rnd_below(100);
            if (r < 35)
                model_stop(st);
            else
                model_arm(st, rnd_delay(true)); /* start, or re-arm while armed */
        }
        sim_check_between();
        sim_expire(t);
    }
    cr_assert_gt(sim.total_fires, 10000u, "the schedule fired too little to mean much");
    sim_wind_down();
    sim_teardown();
}

Test(test_reactor_timers, wheel_random_exactly_once_in_time)
{
    sim_random(false);
}

/* Callbacks also stop and re-arm other timers, some of them due in the same pass. */
Test(test_reactor_timers, wheel_random_callbacks_touch_other_timers)
{
    sim_random(true);
}

/* Exact boundaries: each delay fires at T0 + delay and not one pass earlier, stepping 1 ms near
 * the expiry (the wheel cascades exactly at slot starts). */
Test(test_reactor_timers, wheel_boundaries_step_by_one)
{
    static const uint64_t delays[] = {0,        1,        63,       64,      65,     4095,
                                      4096,     4097,     262143,   262144,  262145, 16777215,
                                      16777216, 16777217, 33554432, 50000001};
    for (unsigned i = 0; i < HD_ARRAY_SIZE(delays); i++) {
        sim_setup(1);
        sim_advance_now(SIM_T0 + 1); /* the tick's time is one ahead of the wheel */
        model_arm(&sim.timers[0], delays[i]);
        uint64_t exp = SIM_T0 + 1 + delays[i];
        /* Big strides until close, then 1 ms: fire must be exactly at exp. */
        while (sim.timers[0].fires == 0) {
            uint64_t left = exp > sim.now ? exp - sim.now : 0;
            uint64_t step = left > 3000 ? left - 1000 - rnd_below(1000) : 1;
            sim_expire(sim.now + step);
        }
        cr_assert_eq(sim.now, exp, "delay %llu fired at +%llu", (unsigned long long)delays[i],
                     (unsigned long long)(sim.now - SIM_T0 - 1));
        sim_teardown();
    }
}

/* Expiries exactly on a slot start of levels 1..3 (multiples of 64, 4096, 262144 ms) while the
 * timer sits on a higher level: the cascade at that millisecond must file it into the level-0
 * slot that is collected in the same step, so it fires at its expiry, not 1 ms later. */
Test(test_reactor_timers, wheel_expiry_on_slot_boundary)
{
    for (unsigned level = 1; level < HD_WHEEL_LEVELS; level++) {
        for (unsigned mult = 1; mult <= 3; mult++) {
            sim_setup(1);
            uint64_t unit = UINT64_C(1) << (HD_WHEEL_BITS * level);
            uint64_t exp = (SIM_T0 / unit + mult) * unit; /* a slot start of this level */
            model_arm(&sim.timers[0], exp - SIM_T0);
            sim_expire(exp - 1);
            cr_assert_eq(sim.timers[0].fires, 0, "fired early");
            sim_expire(exp); /* one pass to exactly the expiry: must fire in it */
            cr_assert_eq(sim.timers[0].fires, 1,
                         "expiry %llu (level %u slot start) did not fire at its expiry",
                         (unsigned long long)exp, level);
            sim_teardown();
        }
    }
}

/* Two timers due in the same pass (in one slot or two): whichever fires first stops the other,
 * which must not fire. */
Test(test_reactor_timers, wheel_callback_stops_timer_due_same_pass)
{
    for (unsigned same_ms = 0; same_ms < 2; same_ms++) {
        sim_setup(3);
        struct sim_timer *a = &sim.timers[0], *b = &sim.timers[1];
        model_arm(a, 10);
        model_arm(b, same_ms ? 10 : 12); /* both due in one pass to T0 + 20 */
        model_arm(&sim.timers[2], 15);   /* fires in the same pass, after them */
        a->buddy = b;
        a->buddy_action = 1;
        b->buddy = a;
        b->buddy_action = 1;
        sim_expire(SIM_T0 + 20);
        cr_assert_eq(a->fires + b->fires, 1, "stopped timer fired anyway (%u + %u fires)", a->fires,
                     b->fires);
        cr_assert_eq(sim.timers[2].fires, 1, "a later timer of the same pass was lost");
        sim_expire(SIM_T0 + 100000);
        cr_assert_eq(a->fires + b->fires, 1);
        cr_assert_eq(sim.s->wheel.armed, 0);
        sim_teardown();
    }
}

/* A callback re-arms another timer that is due in the same pass: it fires only at its new
 * time, and the rest of the pass still fires. */
Test(test_reactor_timers, wheel_callback_rearms_timer_due_same_pass)
{
    sim_setup(4);
    struct sim_timer *a = &sim.timers[0], *b = &sim.timers[1];
    model_arm(a, 5);
    model_arm(b, 6);
    model_arm(&sim.timers[2], 7);
    model_arm(&sim.timers[3], 8);
    a->buddy = b;
    a->buddy_action = 2;
    a->buddy_delay = 500;
    b->buddy = a;
    b->buddy_action = 2;
    b->buddy_delay = 500;
    sim_expire(SIM_T0 + 10);
    /* Exactly one of a, b fired and re-armed the other for T0 + 10 + 500. */
    cr_assert_eq(a->fires + b->fires, 1, "a re-armed timer also fired in the old pass");
    cr_assert_eq(sim.timers[2].fires, 1, "timer 2 of the same pass was lost");
    cr_assert_eq(sim.timers[3].fires, 1, "timer 3 of the same pass was lost");
    sim_expire(SIM_T0 + 509);
    cr_assert_eq(a->fires + b->fires, 1);
    sim_expire(SIM_T0 + 510);
    cr_assert_eq(a->fires + b->fires, 2);
    /* The late one's callback re-armed the first one for T0 + 1010. */
    cr_assert_eq(sim.s->wheel.armed, 1);
    sim_expire(SIM_T0 + 1010);
    cr_assert_eq(a->fires + b->fires, 3);
    cr_assert_eq(sim.s->wheel.armed, 0);
    sim_teardown();
}

/* Stop and re-arm from outside: a stopped timer never fires, a re-armed one only at its new
 * time, re-arming while armed does not double-count. */
Test(test_reactor_timers, wheel_stop_and_rearm)
{
    sim_setup(3);
    model_arm(&sim.timers[0], 100);
    model_arm(&sim.timers[1], 100);
    model_arm(&sim.timers[1], 300000); /* re-arm while armed: moves it to level 3 */
    model_arm(&sim.timers[2], 70000);
    model_stop(&sim.timers[2]);
    model_stop(&sim.timers[2]); /* idempotent */
    cr_assert_eq(sim.s->wheel.armed, 2);
    sim_expire(SIM_T0 + 100);
    cr_assert_eq(sim.timers[0].fires, 1);
    cr_assert_eq(sim.timers[1].fires, 0);
    sim_expire(SIM_T0 + 299999);
    cr_assert_eq(sim.timers[1].fires, 0);
    sim_expire(SIM_T0 + 300000);
    cr_assert_eq(sim.timers[1].fires, 1);
    sim_expire(SIM_T0 + 400000);
    cr_assert_eq(sim.timers[2].fires, 0);
    cr_assert_eq(sim.s->wheel.armed, 0);
    sim_teardown();
}

/* A callback re-arming itself with delay 0 is due at once: next_ms must say 0 (the shard must
 * not sleep), and it fires in the next pass. */
Test(test_reactor_timers, wheel_next_ms_zero_when_due)
{
    sim_setup(2);
    sim.strict_due = true;
    model_arm(&sim.timers[0], 10);
    sim.timers[0].buddy = &sim.timers[1];
    sim.timers[0].buddy_action = 2;
    sim.timers[0].buddy_delay = 0; /* armed from a callback for "now" */
    sim_expire(SIM_T0 + 10);       /* checks next_ms == 0 while timer 1 is due */
    cr_assert_eq(sim.timers[1].fires, 0);
    sim_expire(SIM_T0 + 11);
    cr_assert_eq(sim.timers[1].fires, 1);
    sim_teardown();
}

/* ---------------------------------------------------------------- real shard */

#define REAL_TIMERS 50

struct real_timer {
    struct hd_timer t;
    uint64_t expiry_ms;
    unsigned fired_at; /* 1-based order of firing, 0 = never */
    bool must_not_fire;
};

struct real_ctx {
    struct hd_shard *s;
    struct real_timer timers[REAL_TIMERS];
    struct real_timer stopped[6];
    struct hd_timer stopper, rearmed, end;
    unsigned order;
    uint64_t rearmed_expiry;
    unsigned rearmed_fires;
    bool early;
    unsigned early_id;
};

static struct real_ctx *real;

static void real_fire(struct hd_timer *t)
{
    struct real_timer *rt = hd_container_of(t, struct real_timer, t);
    HDT_CHECK(!rt->must_not_fire);
    HDT_CHECK(rt->fired_at == 0);
    /* Not early: the monotonic clock has reached the expiry (same clock as hd_now_ms). */
    HDT_CHECK(hd_clock_ns() >= rt->expiry_ms * 1000000u);
    HDT_CHECK(hd_now_ms(real->s) >= rt->expiry_ms);
    rt->fired_at = ++real->order;
}

static void real_stopper(struct hd_timer *t)
{
    (void)t;
    /* At 10 ms: stop timers due at 35..45 ms, before they are due. */
    for (unsigned i = 3; i < HD_ARRAY_SIZE(real->stopped); i++) {
        HDT_CHECK(hd_timer_armed(&real->stopped[i].t));
        hd_timer_stop(real->s, &real->stopped[i].t);
        HDT_CHECK(!hd_timer_armed(&real->stopped[i].t));
    }
    /* Re-arm a pending timer from 15 ms to 60 ms from now. */
    hd_timer_start(real->s, &real->rearmed, 60);
    real->rearmed_expiry = hd_now_ms(real->s) + 60;
}

static void real_rearmed(struct hd_timer *t)
{
    (void)t;
    HDT_CHECK(hd_now_ms(real->s) >= real->rearmed_expiry);
    real->rearmed_fires++;
}

static void real_end(struct hd_timer *t)
{
    (void)t;
    hdt_done(real->s);
}

static void real_body(struct hd_shard *s, void *arg)
{
    struct real_ctx *c = arg;
    real = c;
    c->s = s;
    /* Start in a scrambled order so the wheel, not the start order, decides. */
    for (unsigned k = 0; k < REAL_TIMERS; k++) {
        unsigned i = (k * 37u) % REAL_TIMERS; /* 37 is coprime with 50: a permutation */
        struct real_timer *rt = &c->timers[i];
        hd_timer_init(&rt->t, real_fire);
        hd_timer_start(s, &rt->t, i + 1);
        rt->expiry_ms = hd_now_ms(s) + i + 1;
    }
    for (unsigned i = 0; i < HD_ARRAY_SIZE(c->stopped); i++) {
        struct real_timer *rt = &c->stopped[i];
        hd_timer_init(&rt->t, real_fire);
        rt->must_not_fire = true;
        hd_timer_start(s, &rt->t, i < 3 ? 5 + i : 20 + 5 * i);
        if (i < 3) /* stopped at once: never fire */
            hd_timer_stop(s, &rt->t);
    }
    hd_timer_init(&c->stopper, real_stopper);
    hd_timer_start(s, &c->stopper, 10);
    hd_timer_init(&c->rearmed, real_rearmed);
    hd_timer_start(s, &c->rearmed, 15);
    hd_timer_init(&c->end, real_end);
    hd_timer_start(s, &c->end, 120);
}

Test(test_reactor_timers, real_shard_order_and_stop)
{
    static struct real_ctx c;
    memset(&c, 0, sizeof(c));
    struct hdt_options one = {.shards = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&one, real_body, &c, &rt), 0);
    for (unsigned i = 0; i < REAL_TIMERS; i++)
        cr_assert_eq(c.timers[i].fired_at, i + 1, "timer of %u ms fired as #%u", i + 1,
                     c.timers[i].fired_at);
    for (unsigned i = 0; i < HD_ARRAY_SIZE(c.stopped); i++)
        cr_assert_eq(c.stopped[i].fired_at, 0);
    cr_assert_eq(c.rearmed_fires, 1);
    /* 50 + stopper + re-armed + end */
    cr_assert_eq(hd_shard_stats(hd_runtime_shard(rt, 0))->timers_fired, REAL_TIMERS + 3);
    hd_runtime_destroy(rt);
}

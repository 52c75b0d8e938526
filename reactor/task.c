/* task.c - deferred tasks (a fixed ring per shard) and end-of-tick flushes (an intrusive list).
 * Runs on the owning shard's thread. */
#include <errno.h>

#include "hd_impl.h"

#define TASK_MASK (HD_DEFER_RING_SIZE - 1u)

int hd_defer_task(struct hd_shard *s, struct hd_task t)
{
    if (s->tasks_tail - s->tasks_head == HD_DEFER_RING_SIZE)
        return -EAGAIN;
    s->tasks[s->tasks_tail & TASK_MASK] = t;
    s->tasks_tail++;
    return 0;
}

int hd_defer(struct hd_shard *s, hd_task_fn *fn, void *arg)
{
    HD_ASSERT(fn != NULL);
    return hd_defer_task(s, (struct hd_task){.fn = fn, .arg = arg});
}

/* A task on a handle: the object if the handle is still live, else dropped and counted. */
static void task_run(struct hd_shard *s, const struct hd_task *t)
{
    if (!t->by_handle) {
        hd_running(s, HD_RUN_TASK, (const void *)t->fn);
        t->fn(t->arg);
        return;
    }
    void *obj = hd_handle_get(s, (struct hd_handle){t->handle});
    if (obj == NULL) {
        s->stats.tasks_stale++;
        return;
    }
    hd_running(s, HD_RUN_TASK, (const void *)t->hfn);
    t->hfn(s, obj);
}

void hd_tasks_run(struct hd_shard *s)
{
    /* Only the tasks queued before this pass: a task that defers runs next tick, so the loop
     * always reaches the ring again. */
    uint32_t end = s->tasks_tail;
    while (s->tasks_head != end) {
        struct hd_task t = s->tasks[s->tasks_head & TASK_MASK];
        s->tasks_head++;
        s->stats.tasks_run++;
        task_run(s, &t);
    }
}

void hd_flush_init(struct hd_flush *f, hd_flush_fn *fn)
{
    *f = (struct hd_flush){.fn = fn};
}

void hd_flush_request(struct hd_shard *s, struct hd_flush *f)
{
    if (f->queued)
        return;
    f->queued = true;
    f->next = s->flush_head;
    s->flush_head = f;
}

static bool flush_unlink(struct hd_flush **pp, struct hd_flush *f)
{
    for (; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            return true;
        }
    }
    return false;
}

void hd_flush_cancel(struct hd_shard *s, struct hd_flush *f)
{
    if (!f->queued)
        return;
    /* It may sit in the list being run right now (cancelled by an earlier flush). */
    if (!flush_unlink(&s->flush_head, f))
        flush_unlink(&s->flush_running, f);
    f->queued = false;
    f->next = NULL;
}

void hd_flushes_run(struct hd_shard *s)
{
    /* Detach first: a flush may request itself or others again (they run next tick); one that
     * is cancelled meanwhile is unlinked from the running list and never runs. */
    s->flush_running = s->flush_head;
    s->flush_head = NULL;
    while (s->flush_running) {
        struct hd_flush *f = s->flush_running;
        s->flush_running = f->next;
        f->queued = false;
        f->next = NULL;
        hd_running(s, HD_RUN_FLUSH, (const void *)f->fn);
        f->fn(f);
    }
}

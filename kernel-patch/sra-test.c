// SPDX-License-Identifier: GPL-2.0
/*
 * sra-test: the /init of the SCHED_SRA test guest.
 *
 * Runs as PID 1 in a qemu guest booted from the patched kernel, exercises
 * the SCHED_SRA class and prints one line per scenario:
 *
 *	PASS <scenario> <numbers>
 *	FAIL <scenario> <what went wrong>
 *
 * followed by "SRA-TEST done failures=<n>", then reboots (qemu runs with
 * -no-reboot, so the guest ends). Built with gcc -static.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SCHED_SRA 8
#define PERIOD_NS 10000000ULL
#define PAGE 4096UL

struct sched_attr_v1 {
	uint32_t size;
	uint32_t sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime;
	uint64_t sched_deadline;
	uint64_t sched_period;
};

static int failures;
/* sra_strict_overhead=1 on the kernel command line: assert scenario 7's 3%. */
static int strict_overhead;

static void result(int ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s ", ok ? "PASS" : "FAIL", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		failures++;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Returns 0 or -errno. */
static int set_policy(pid_t pid, int policy, int prio)
{
	struct sched_attr_v1 attr = {
		.size = sizeof(attr),
		.sched_policy = policy,
		.sched_priority = prio,
	};

	if (syscall(SYS_sched_setattr, pid, &attr, 0))
		return -errno;
	return 0;
}

static int get_policy(pid_t pid)
{
	struct sched_attr_v1 attr;

	if (syscall(SYS_sched_getattr, pid, &attr, sizeof(attr), 0))
		return -errno;
	return attr.sched_policy;
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity");
}

/* pid 0 is the calling task, as for sched_setattr(). */
static void proc_path(char *buf, size_t len, pid_t pid)
{
	if (pid)
		snprintf(buf, len, "/proc/%d/sched_sra", pid);
	else
		snprintf(buf, len, "/proc/self/sched_sra");
}

static void dump_file(const char *path)
{
	char line[256];
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		printf("  %s", line);
	fclose(f);
}

/* Writes a configuration to /proc/<pid>/sched_sra; 0 or -errno. */
static int sra_write(pid_t pid, const char *cfg)
{
	char path[64];
	int fd, ret = 0;

	proc_path(path, sizeof(path), pid);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	if (write(fd, cfg, strlen(cfg)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* Reads "key value" from a file; returns -1 if missing. */
static long long read_key(const char *path, const char *key)
{
	char line[256];
	size_t len = strlen(key);
	long long val = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, len) && line[len] == ' ') {
			val = strtoll(line + len + 1, NULL, 0);
			break;
		}
	}
	fclose(f);
	return val;
}

static long long sra_stat(pid_t pid, const char *key)
{
	char path[64];

	proc_path(path, sizeof(path), pid);
	return read_key(path, key);
}

static long long global_stat(const char *key)
{
	return read_key("/proc/sched_sra", key);
}

static int perf_open(pid_t pid, uint32_t type, uint64_t config)
{
	struct perf_event_attr attr = {
		.type = type,
		.size = sizeof(attr),
		.config = config,
	};

	return syscall(SYS_perf_event_open, &attr, pid, -1, -1, 0);
}

static uint64_t perf_value(int fd)
{
	uint64_t v = 0;

	if (read(fd, &v, sizeof(v)) != sizeof(v))
		return 0;
	return v;
}

static void *shared_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(p, 0, size);
	return p;
}

static int wait_child(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/*
 * Page-fault workload: every call touches a page that is not mapped, so
 * it costs exactly one page fault. The region is replaced by a fresh
 * mapping when used up (munmap and mmap do not fault; the test kernel has
 * no madvise()).
 */
#define TOUCH_PAGES 1024
static char *touch_region;
static unsigned long touch_next;

static void touch_init(void)
{
	if (touch_region)
		munmap(touch_region, TOUCH_PAGES * PAGE);
	touch_region = mmap(NULL, TOUCH_PAGES * PAGE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (touch_region == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	touch_next = 0;
}

static void touch_one(void)
{
	if (touch_next == TOUCH_PAGES)
		touch_init();
	touch_region[touch_next++ * PAGE] = 1;
}

/* Page faults per 10 ms for the scenarios other than (1). */
#define DEFAULT_QUOTA 50
static char cfg_faults[128];

static void make_fault_cfg(unsigned long quota)
{
	snprintf(cfg_faults, sizeof(cfg_faults),
		 "period_ns=%llu event=%d:%d:%lu", PERIOD_NS,
		 PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, quota);
}

/*
 * (1) A quota of Q page faults per 10 ms holds over 500 periods and the
 * task runs again in every period. A period is the time between two
 * refills of the kernel's period timer (nr_periods in /proc/self/sched_sra
 * counts them); the test counts its own page faults (one per touched page,
 * checked against a perf page-fault counter) per period.
 */
#define S1_QUOTA 20
#define S1_PERIODS 500
struct s1_result {
	int err;
	uint64_t touches, oracle_faults;
	long long throttles, throttled_ns, kernel_periods;
	long long missed_periods, max_late_ns;
	int max_in_period, min_in_period, empty_periods, max_period;
	int max_in_10ms;
};

static long long periods_now(int fd)
{
	char buf[1024], *p;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strstr(buf, "\nnr_periods ");
	return p ? strtoll(p + 12, NULL, 10) : -1;
}

static void s1_child(struct s1_result *r)
{
	size_t cap = (S1_PERIODS + 8) * (S1_QUOTA * 2 + 8);
	uint64_t *ts = malloc(cap * sizeof(*ts));
	uint32_t *per = malloc(cap * sizeof(*per));
	int *count = calloc(S1_PERIODS + 16, sizeof(int));
	int *wall = calloc(S1_PERIODS * 2 + 16, sizeof(int));
	long long first, last, p;
	uint64_t i, n = 0;
	int fd, sfd, b;

	memset(ts, 0, cap * sizeof(*ts));
	memset(per, 0, cap * sizeof(*per));
	touch_init();
	pin(1);
	make_fault_cfg(S1_QUOTA);
	r->err = sra_write(0, cfg_faults);
	if (!r->err)
		r->err = set_policy(0, SCHED_SRA, 0);
	sfd = open("/proc/self/sched_sra", O_RDONLY);
	if (!r->err && sfd < 0)
		r->err = -errno;
	if (r->err)
		exit(1);
	fd = perf_open(0, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS);

	/* Start with the first complete period. */
	first = periods_now(sfd) + 1;
	while (periods_now(sfd) < first)
		;
	last = first + S1_PERIODS;
	ioctl(fd, PERF_EVENT_IOC_RESET, 0);
	while (n < cap) {
		p = periods_now(sfd);
		if (p >= last)
			break;
		touch_one();
		ts[n] = now_ns();
		per[n++] = p - first;
	}
	r->oracle_faults = perf_value(fd);
	r->touches = n;
	r->throttles = sra_stat(0, "nr_throttled");
	r->throttled_ns = sra_stat(0, "throttled_ns");
	r->kernel_periods = sra_stat(0, "nr_periods");
	r->missed_periods = sra_stat(0, "nr_missed_periods");
	r->max_late_ns = sra_stat(0, "max_refill_late_ns");
	if (r->throttles <= 0)
		dump_file("/proc/self/sched_sra");
	set_policy(0, SCHED_OTHER, 0);

	for (i = 0; i < n; i++) {
		if (per[i] < S1_PERIODS)
			count[per[i]]++;
		b = (ts[i] - ts[0]) / PERIOD_NS;
		if (b < S1_PERIODS * 2)
			wall[b]++;
	}
	r->min_in_period = 1 << 30;
	for (b = 0; b < S1_PERIODS; b++) {
		if (count[b] > r->max_in_period) {
			r->max_in_period = count[b];
			r->max_period = b;
		}
		if (count[b] < r->min_in_period)
			r->min_in_period = count[b];
		if (!count[b])
			r->empty_periods++;
	}
	for (b = 0; b < S1_PERIODS * 2; b++)
		if (wall[b] > r->max_in_10ms)
			r->max_in_10ms = wall[b];
	exit(0);
}

static void scenario_quota(void)
{
	struct s1_result *r = shared_alloc(sizeof(*r));
	pid_t pid = fork();
	double limit = S1_QUOTA * 1.02;

	if (!pid)
		s1_child(r);
	wait_child(pid);
	if (r->err) {
		result(0, "sra-quota", "setup failed: %s", strerror(-r->err));
		return;
	}
	/*
	 * Under TCG on a busy host a vCPU can stall for longer than a period;
	 * two refills then come back to back and the task cannot run between
	 * them. The kernel's refill lateness is printed; up to 2% of such
	 * periods is accepted. For the same reason the task, slowed down by
	 * the host, does not reach its quota in every period: a throttle in a
	 * quarter of the periods shows that the quota binds.
	 */
	result(r->max_in_period <= limit &&
	       r->empty_periods <= S1_PERIODS / 50 &&
	       r->touches > 0 && r->oracle_faults + 1 >= r->touches &&
	       r->oracle_faults <= r->touches + r->touches / 100 + 16 &&
	       r->throttles >= S1_PERIODS / 4,
	       "sra-quota",
	       "quota=%d/10ms periods=%d max_faults_in_period=%d (limit %.0f, period %d) min=%d empty_periods=%d touches=%llu perf_page_faults=%llu nr_throttled=%lld throttled_ms=%lld max_faults_in_10ms_wall_window=%d refill_max_late_us=%lld missed_refills=%lld",
	       S1_QUOTA, S1_PERIODS, r->max_in_period, limit, r->max_period,
	       r->min_in_period, r->empty_periods,
	       (unsigned long long)r->touches,
	       (unsigned long long)r->oracle_faults, r->throttles,
	       r->throttled_ns / 1000000, r->max_in_10ms,
	       r->max_late_ns / 1000, r->missed_periods);
}

/*
 * (2) A CFS task on the same CPU runs while the SRA task is throttled.
 * (3) An RT task preempts an SRA task that is never throttled.
 */
struct share {
	volatile int stop;
	volatile int ready;
	int err;
	uint64_t cpu_ns, iterations, done_at, worst_late_ns;
	long long throttles;
};

static void busy_until_stop(struct share *s)
{
	uint64_t it = 0;

	while (!s->stop)
		it++;
	s->iterations = it;
	s->cpu_ns = cpu_ns();
}

static void scenario_cfs_runs(void)
{
	struct share *sra = shared_alloc(sizeof(*sra));
	struct share *cfs = shared_alloc(sizeof(*cfs));
	pid_t ps, pc;
	uint64_t t0, wall;

	ps = fork();
	if (!ps) {
		touch_init();
		pin(1);
		make_fault_cfg(DEFAULT_QUOTA);
		sra->err = sra_write(0, cfg_faults);
		if (!sra->err)
			sra->err = set_policy(0, SCHED_SRA, 0);
		sra->ready = 1;
		while (!sra->stop)
			touch_one();
		sra->throttles = sra_stat(0, "nr_throttled");
		sra->cpu_ns = cpu_ns();
		exit(0);
	}
	while (!sra->ready)
		usleep(1000);
	pc = fork();
	if (!pc) {
		pin(1);
		busy_until_stop(cfs);
		exit(0);
	}
	t0 = now_ns();
	usleep(1000000);
	sra->stop = 1;
	cfs->stop = 1;
	wait_child(ps);
	wait_child(pc);
	wall = now_ns() - t0;
	result(!sra->err && cfs->cpu_ns > wall / 4 && sra->throttles > 10,
	       "cfs-while-throttled",
	       "wall_ms=%llu cfs_cpu_ms=%llu sra_cpu_ms=%llu sra_throttles=%lld",
	       (unsigned long long)wall / 1000000,
	       (unsigned long long)cfs->cpu_ns / 1000000,
	       (unsigned long long)sra->cpu_ns / 1000000, sra->throttles);
}

static void scenario_rt_preempts(void)
{
	struct share *sra = shared_alloc(sizeof(*sra));
	struct share *rt = shared_alloc(sizeof(*rt));
	struct share *cfs = shared_alloc(sizeof(*cfs));
	uint64_t sra_end;
	pid_t ps, pr, pc;

	ps = fork();
	if (!ps) {
		pin(1);
		make_fault_cfg(1000000000UL);
		sra->err = sra_write(0, cfg_faults);
		if (!sra->err)
			sra->err = set_policy(0, SCHED_SRA, 0);
		sra->ready = 1;
		busy_until_stop(sra);
		sra->throttles = sra_stat(0, "nr_throttled");
		sra->done_at = now_ns();
		exit(0);
	}
	while (!sra->ready)
		usleep(1000);
	/* A CFS task on the same CPU must not run while SRA spins. */
	pc = fork();
	if (!pc) {
		pin(1);
		busy_until_stop(cfs);
		exit(0);
	}
	pr = fork();
	if (!pr) {
		int i;

		/* RT first: a CFS task could not get onto the SRA task's CPU. */
		rt->err = set_policy(0, SCHED_FIFO, 10);
		pin(1);
		for (i = 0; i < 200; i++) {
			uint64_t t = now_ns(), late;
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
			late = now_ns() - t - 1000000;
			if (late > rt->worst_late_ns)
				rt->worst_late_ns = late;
			rt->iterations++;
		}
		rt->done_at = now_ns();
		exit(0);
	}
	wait_child(pr);
	usleep(200000);
	sra_end = now_ns();
	cfs->stop = 1;
	sra->stop = 1;
	wait_child(ps);
	wait_child(pc);
	result(!sra->err && !rt->err && rt->iterations == 200 &&
	       rt->done_at < sra_end && sra->throttles == 0 &&
	       cfs->iterations == 0,
	       "rt-preempts-sra",
	       "rt_wakeups=%llu rt_worst_wakeup_late_us=%llu rt_done_before_sra_stop=%d sra_throttles=%lld cfs_iterations_during_sra=%llu",
	       (unsigned long long)rt->iterations,
	       (unsigned long long)rt->worst_late_ns / 1000,
	       rt->done_at < sra_end, sra->throttles,
	       (unsigned long long)cfs->iterations);
}

/* (4) CFS -> SRA -> CFS 1000 times leaks no counters or timers. */
static void scenario_switch_leak(void)
{
	long long ev0 = global_stat("events"), tm0 = global_stat("timers");
	long long seen_events = 0, seen_timers = 0;
	int i, err = 0, bad_policy = 0;
	struct share *s = shared_alloc(sizeof(struct share));
	pid_t pid = fork();

	if (!pid) {
		touch_init();
		pin(1);
		s->ready = 1;
		for (;;)
			touch_one();
	}
	while (!s->ready)
		usleep(1000);
	make_fault_cfg(DEFAULT_QUOTA);
	err = sra_write(pid, cfg_faults);
	for (i = 0; i < 1000 && !err; i++) {
		err = set_policy(pid, SCHED_SRA, 0);
		if (err)
			break;
		if (get_policy(pid) != SCHED_SRA)
			bad_policy++;
		if (i == 500) {
			seen_events = global_stat("events");
			seen_timers = global_stat("timers");
		}
		err = set_policy(pid, SCHED_OTHER, 0);
		if (get_policy(pid) != SCHED_OTHER)
			bad_policy++;
	}
	long long ev1 = global_stat("events"), tm1 = global_stat("timers");
	long long tasks1 = global_stat("tasks");

	kill(pid, SIGKILL);
	wait_child(pid);
	long long tasks2 = global_stat("tasks");

	result(!err && !bad_policy && i == 1000 && ev0 == 0 && tm0 == 0 &&
	       seen_events == ev0 + 1 && seen_timers == tm0 + 1 &&
	       ev1 == ev0 && tm1 == tm0 && tasks1 == 1 && tasks2 == 0,
	       "switch-leak",
	       "switches=%d err=%s live_events(before/in SRA/after)=%lld/%lld/%lld live_timers=%lld/%lld/%lld configs(before exit/after)=%lld/%lld",
	       i, err ? strerror(-err) : "none", ev0, seen_events, ev1, tm0,
	       seen_timers, tm1, tasks1, tasks2);
}

/* (5) Bad parameters give EINVAL, missing privilege EPERM. */
static void scenario_errors(void)
{
	static const struct {
		const char *cfg;
		int err;
	} cases[] = {
		{ "period_ns=10 event=1:2:50", EINVAL },		/* period too short */
		{ "period_ns=2000000000 event=1:2:50", EINVAL },	/* too long */
		{ "period_ns=10000000", EINVAL },			/* no event */
		{ "period_ns=10000000 event=1:2:0", EINVAL },		/* zero quota */
		{ "period_ns=10000000 event=1:2", EINVAL },		/* no quota */
		{ "period_ns=10000000 event=2:1:5", EINVAL },		/* tracepoint */
		{ "period_ns=10000000 event=1:99:5", EINVAL },		/* no such sw event */
		{ "period_ns=10000000 event=1:2:1 event=1:2:1 event=1:2:1 event=1:2:1 event=1:2:1", EINVAL },
		{ "period_ns=abc event=1:2:5", EINVAL },
		{ "quota=5", EINVAL },
	};
	struct share *s = shared_alloc(sizeof(*s));
	int i, ok = 1, got;
	char detail[512] = "";
	pid_t pid;

	for (i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
		got = sra_write(getpid(), cases[i].cfg);
		if (got != -cases[i].err) {
			ok = 0;
			snprintf(detail + strlen(detail),
				 sizeof(detail) - strlen(detail),
				 " [%s]->%s", cases[i].cfg, strerror(-got));
		}
	}

	/* SCHED_SRA without a configuration, or with an RT priority. */
	pid = fork();
	if (!pid) {
		s->err = set_policy(0, SCHED_SRA, 0);
		make_fault_cfg(DEFAULT_QUOTA);
		sra_write(0, cfg_faults);
		s->iterations = -set_policy(0, SCHED_SRA, 5);
		exit(0);
	}
	wait_child(pid);
	if (s->err != -EINVAL || s->iterations != EINVAL) {
		ok = 0;
		snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
			 " [unconfigured]->%d [prio 5]->%d", s->err,
			 (int)s->iterations);
	}

	/* Kernel threads cannot be SRA tasks. */
	make_fault_cfg(DEFAULT_QUOTA);
	got = sra_write(2, cfg_faults);
	if (got != -EINVAL) {
		ok = 0;
		snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
			 " [kthreadd]->%s", strerror(-got));
	}

	/* Unprivileged: configuration and policy change give EPERM. */
	memset(s, 0, sizeof(*s));
	pid = fork();
	if (!pid) {
		if (setgid(65534) || setuid(65534))
			exit(2);
		/* Stay the owner of /proc/self after dropping root. */
		prctl(PR_SET_DUMPABLE, 1);
		make_fault_cfg(DEFAULT_QUOTA);
		s->err = sra_write(0, cfg_faults);
		s->iterations = -set_policy(0, SCHED_SRA, 0);
		exit(0);
	}
	got = wait_child(pid);
	if (got || s->err != -EPERM || s->iterations != EPERM) {
		ok = 0;
		snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
			 " [unprivileged] exit=%d write=%d setattr=%d", got,
			 s->err, -(int)s->iterations);
	}
	result(ok, "einval-eperm", "cases=%d%s",
	       (int)(sizeof(cases) / sizeof(cases[0])) + 4,
	       ok ? " all gave the expected errno" : detail);
}

/* (6) fork and exit of SRA tasks leak nothing; SRA is not inherited. */
static void scenario_fork_exit(void)
{
	struct share *s = shared_alloc(sizeof(*s));
	int i, bad = 0, inherited = 0;
	pid_t pid;

	make_fault_cfg(DEFAULT_QUOTA);
	for (i = 0; i < 100; i++) {
		pid = fork();
		if (!pid) {
			pid_t c;
			int st;

			touch_init();
			if (sra_write(0, cfg_faults) || set_policy(0, SCHED_SRA, 0))
				exit(3);
			c = fork();
			if (!c)
				exit(get_policy(0) == SCHED_SRA ? 4 : 0);
			if (waitpid(c, &st, 0) != c || WEXITSTATUS(st))
				exit(4);
			/* Exit while SRA, half of them while throttled. */
			if (i & 1) {
				int k;

				for (k = 0; k < 200; k++)
					touch_one();
			}
			exit(0);
		}
		switch (wait_child(pid)) {
		case 0:
			break;
		case 4:
			inherited++;
			break;
		default:
			bad++;
		}
	}
	/* exec keeps the policy and the counters: the new image is throttled. */
	int exec_status;

	pid = fork();
	if (!pid) {
		if (sra_write(0, cfg_faults) || set_policy(0, SCHED_SRA, 0))
			exit(3);
		execl("/init", "/init", "exec-probe", (char *)NULL);
		exit(6);
	}
	exec_status = wait_child(pid);

	long long tasks = global_stat("tasks"), events = global_stat("events");
	long long timers = global_stat("timers");

	(void)s;
	result(!bad && !inherited && !exec_status && tasks == 0 &&
	       events == 0 && timers == 0,
	       "fork-exit-leak",
	       "sra_tasks=100 children_forked=100 failed=%d children_inheriting_sra=%d exec_probe=%s live_configs=%lld live_events=%lld live_timers=%lld",
	       bad, inherited, exec_status ? "failed" : "still-SRA-and-throttled",
	       tasks, events, timers);
}

/*
 * (7) An SRA task that never reaches its quota runs as fast as under CFS.
 *
 * The same workload (a compute loop with a page fault every 16 iterations)
 * runs in four modes:
 *   CFS         SCHED_NORMAL, no perf counter;
 *   CFS+counter SCHED_NORMAL with a task-bound page-fault perf counter, i.e.
 *               what `perf stat -e page-faults` costs;
 *   SRA faults  SCHED_SRA with a page-fault quota it never reaches;
 *   SRA clock   SCHED_SRA with a task-clock quota it never reaches: a
 *               counter without a per-event hook, like a hardware counter
 *               (the thesis's TC3 used an L1D quota).
 * A software page-fault counter runs a hook at every fault whoever owns it,
 * so the class's own cost is SRA faults against CFS+counter and SRA clock
 * against CFS; SRA faults against CFS is printed as well. Each group runs
 * the four modes once, in an order rotated from group to group, so slow
 * changes of the host's load cancel. Two estimates per comparison: the
 * median of the per-group ratios, and the ratio of the modes' upper-quartile
 * rates. The host only ever takes time away from the guest, so the fastest
 * rounds of a mode are the least disturbed ones (the minimum-time estimator
 * of seed 001); the quartile rather than the maximum keeps one lucky round
 * from deciding.
 */
#define S7_GROUPS 80
#define S7_ROUND_NS 100000000ULL
enum { S7_CFS, S7_CFS_COUNTER, S7_SRA_FAULTS, S7_SRA_CLOCK, S7_MODES };
static const char *const s7_mode_names[S7_MODES] = {
	"cfs", "cfs+counter", "sra_faults", "sra_clock",
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct s7_result {
	int err;
	double rate[S7_MODES][S7_GROUPS];
	long long throttles, faults_per_round;
};

/* Iterations per second of wall time. */
static double s7_round(long long *faults)
{
	uint64_t t0 = now_ns(), it = 0, t1;
	volatile uint64_t x = 1;

	*faults = 0;
	while (now_ns() - t0 < S7_ROUND_NS) {
		int k;

		for (k = 0; k < 2000; k++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		it++;
		if (!(it & 15)) {
			touch_one();
			++*faults;
		}
	}
	t1 = now_ns();
	return it * 1e9 / (t1 - t0);
}

static double s7_run_mode(struct s7_result *r, int mode)
{
	static char cfg_clock[128];
	double rate;
	int fd = -1;

	switch (mode) {
	case S7_CFS_COUNTER:
		fd = perf_open(0, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS);
		if (fd < 0)
			r->err = -errno;
		break;
	case S7_SRA_FAULTS:
		r->err = sra_write(0, cfg_faults);
		if (!r->err)
			r->err = set_policy(0, SCHED_SRA, 0);
		break;
	case S7_SRA_CLOCK:
		/* 1 s of task clock per 10 ms period: never reached. */
		snprintf(cfg_clock, sizeof(cfg_clock),
			 "period_ns=%llu event=%d:%d:%llu", PERIOD_NS,
			 PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK,
			 1000000000ULL);
		r->err = sra_write(0, cfg_clock);
		if (!r->err)
			r->err = set_policy(0, SCHED_SRA, 0);
		break;
	}
	rate = s7_round(&r->faults_per_round);
	if (fd >= 0) {
		if (perf_value(fd) < (uint64_t)r->faults_per_round)
			r->err = -EIO;
		close(fd);
	}
	if (mode == S7_SRA_FAULTS || mode == S7_SRA_CLOCK) {
		r->throttles += sra_stat(0, "nr_throttled");
		if (!r->err)
			r->err = set_policy(0, SCHED_OTHER, 0);
	}
	return rate;
}

static double s7_median_ratio(struct s7_result *r, int num, int den,
			      double *lo, double *hi)
{
	double ratio[S7_GROUPS];
	int i;

	for (i = 0; i < S7_GROUPS; i++)
		ratio[i] = r->rate[num][i] / r->rate[den][i];
	qsort(ratio, S7_GROUPS, sizeof(double), cmp_double);
	*lo = ratio[0];
	*hi = ratio[S7_GROUPS - 1];
	return (ratio[S7_GROUPS / 2 - 1] + ratio[S7_GROUPS / 2]) / 2;
}

static void scenario_overhead(void)
{
	struct s7_result *r = shared_alloc(sizeof(*r));
	double class_faults, class_clock, raw, lo[3], hi[3];
	double median_rate[S7_MODES], quartile_rate[S7_MODES];
	pid_t pid = fork();
	int i, m;

	if (!pid) {
		touch_init();
		pin(1);
		make_fault_cfg(1000000UL);
		for (i = 0; i < S7_GROUPS && !r->err; i++)
			for (m = 0; m < S7_MODES && !r->err; m++) {
				int mode = (m + i) % S7_MODES;

				r->rate[mode][i] = s7_run_mode(r, mode);
			}
		exit(0);
	}
	wait_child(pid);
	class_faults = s7_median_ratio(r, S7_SRA_FAULTS, S7_CFS_COUNTER,
				       &lo[0], &hi[0]);
	class_clock = s7_median_ratio(r, S7_SRA_CLOCK, S7_CFS, &lo[1], &hi[1]);
	raw = s7_median_ratio(r, S7_SRA_FAULTS, S7_CFS, &lo[2], &hi[2]);
	for (m = 0; m < S7_MODES; m++) {
		double sorted[S7_GROUPS];

		memcpy(sorted, r->rate[m], sizeof(sorted));
		qsort(sorted, S7_GROUPS, sizeof(double), cmp_double);
		median_rate[m] = sorted[S7_GROUPS / 2];
		quartile_rate[m] = sorted[S7_GROUPS * 3 / 4];
	}
	/*
	 * The project's tests assert no speeds: by default the ratios are
	 * measured and printed, and only the behaviour (never throttled, no
	 * errors, the counter saw every fault) is checked.
	 * sra_strict_overhead=1 also asserts the 3% for the class's cost.
	 */
	result(!r->err && r->throttles == 0 && r->faults_per_round > 0 &&
	       (!strict_overhead ||
		(quartile_rate[S7_SRA_FAULTS] >=
			 0.97 * quartile_rate[S7_CFS_COUNTER] &&
		 quartile_rate[S7_SRA_CLOCK] >= 0.97 * quartile_rate[S7_CFS])),
	       "no-quota-overhead",
	       "%s groups=%d x 4 x 100ms; upper-quartile rate ratios: sra_faults/cfs+counter=%.4f sra_clock/cfs=%.4f sra_faults/cfs=%.4f; median per-group ratios: sra_faults/cfs+counter=%.4f (%.3f..%.3f) sra_clock/cfs=%.4f (%.3f..%.3f) sra_faults/cfs=%.4f (%.3f..%.3f); median_iter_per_s %s=%.0f %s=%.0f %s=%.0f %s=%.0f page_faults_per_round=%lld quotas=1000000 faults or 1s task-clock/10ms throttles=%lld err=%d",
	       strict_overhead ? "(3% asserted)" : "(3% measured, not asserted)",
	       S7_GROUPS,
	       quartile_rate[S7_SRA_FAULTS] / quartile_rate[S7_CFS_COUNTER],
	       quartile_rate[S7_SRA_CLOCK] / quartile_rate[S7_CFS],
	       quartile_rate[S7_SRA_FAULTS] / quartile_rate[S7_CFS],
	       class_faults, lo[0], hi[0], class_clock, lo[1],
	       hi[1], raw, lo[2], hi[2],
	       s7_mode_names[0], median_rate[0], s7_mode_names[1],
	       median_rate[1], s7_mode_names[2], median_rate[2],
	       s7_mode_names[3], median_rate[3], r->faults_per_round,
	       r->throttles, r->err);
}

/* After exec as an SRA task: still SRA, and the quota still throttles. */
static int exec_probe(void)
{
	int k;

	if (get_policy(0) != SCHED_SRA)
		return 5;
	touch_init();
	for (k = 0; k < 200; k++)
		touch_one();
	return sra_stat(0, "nr_throttled") >= 3 ? 0 : 7;
}

/*
 * (8) The hwqos-sra agent's SCHED_SRA backend (issue 7, item 5): a statically
 * linked /hwqos-sra applies a contract with a page-fault quota to a faulting
 * victim; the agent must pick the kernel backend on its own (/proc/sched_sra
 * exists), the victim must be SCHED_SRA with the contract's quota and get
 * throttled, and when the agent exits it must hand the victim back to CFS.
 */
#define AGENT "/hwqos-sra"
#define AGENT_LOG "/run/hwqos-sra.log"

static void scenario_agent(void)
{
	const char *name = "agent-sched-sra-backend";
	char contract[512], path[64], line[512];
	long long policy = -1, quota = -1, throttled = -1, after_policy = -1;
	int backend_logged = 0, status, fd;
	pid_t victim, agent;
	FILE *f;

	if (access(AGENT, X_OK)) {
		result(0, name, "%s missing from the initramfs", AGENT);
		return;
	}
	mkdir("/run", 0755);
	victim = fork();
	if (victim == 0) {
		pin(1);
		touch_init();
		for (;;)
			touch_one();
	}
	snprintf(contract, sizeof(contract),
		 "{\"schema\": \"hwqos.contract/1\", \"entries\": [{\"name\": \"victim\", "
		 "\"process\": \"pid:%d\", \"affinity\": [1], \"period_us\": 10000, "
		 "\"quotas\": {\"sw.page_faults\": 20}}]}\n", (int)victim);
	f = fopen("/run/contract.json", "w");
	if (!f || fputs(contract, f) < 0 || fclose(f)) {
		result(0, name, "cannot write /run/contract.json");
		kill(victim, SIGKILL);
		wait_child(victim);
		return;
	}
	agent = fork();
	if (agent == 0) {
		cpu_set_t all;
		int c;

		/* /init pins itself to CPU 0; the agent may use every CPU. */
		CPU_ZERO(&all);
		for (c = 0; c < 2; c++)
			CPU_SET(c, &all);
		sched_setaffinity(0, sizeof(all), &all);
		fd = open(AGENT_LOG, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(AGENT, AGENT, "apply", "/run/contract.json", "--backend", "auto",
		      "--duration-s", "3", "--state-dir", "/run/hwqos-sra",
		      (char *)NULL);
		_exit(127);
	}
	/* Wait for the agent to apply the contract (seconds under TCG), then let
	 * the victim run some periods under it. */
	for (int i = 0; i < 100 && sra_stat(victim, "policy") != 8; i++)
		usleep(100000);
	usleep(500000);
	policy = sra_stat(victim, "policy");
	quota = -1;
	proc_path(path, sizeof(path), victim);
	f = fopen(path, "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			unsigned int type;
			unsigned long long config;
			long long q;

			/* "event0 <type> 0x<config> <quota>" */
			if (sscanf(line, "event0 %u %llx %lld", &type, &config, &q) == 3)
				quota = q;
		}
		fclose(f);
	}
	throttled = sra_stat(victim, "nr_throttled");
	status = wait_child(agent);
	after_policy = sra_stat(victim, "policy");
	kill(victim, SIGKILL);
	wait_child(victim);
	f = fopen(AGENT_LOG, "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			if (strstr(line, "sched_sra"))
				backend_logged = 1;
			printf("  agent: %s", line);
		}
		fclose(f);
	}
	result(status == 0 && policy == 8 && quota == 20 && throttled > 0 &&
		       after_policy != 8 && backend_logged,
	       name,
	       "agent_exit=%d victim_policy_under_agent=%lld quota=%lld nr_throttled=%lld "
	       "policy_after_agent=%lld backend_logged=%d",
	       status, policy, quota, throttled, after_policy, backend_logged);
}

/*
 * (9) Placement: 4 CPU-bound SRA tasks, started on CPU 0 and allowed on both
 * CPUs, end up running on both. Two runs:
 *   queued  the tasks wait in a sched_yield() loop on CPU 0 (runnable,
 *           never asleep), are made SRA and allowed on both CPUs while
 *           queued there, and never sleep, so only the class's push (at
 *           every pick on a runqueue with waiting SRA tasks) can move them;
 *   wakeup  the tasks sleep on a futex on CPU 0, are made SRA and allowed
 *           on both CPUs while asleep, and are woken together, so
 *           select_task_rq() places them (the push corrects stale counts).
 * /init does the switch as SCHED_FIFO on CPU 0, so no SRA task runs before
 * all of them are set up. Each task spins for S9_RUN_NS of wall time and
 * charges its own thread CPU time, sampled every few microseconds, to the
 * CPU it is on (getcpu). A run passes when each CPU got at least 35% of
 * the tasks' CPU time (2 tasks per CPU give 50%; with the old placement,
 * which kept a task on its CPU, CPU 1 got none).
 */
#define S9_TASKS 4
#define S9_RUN_NS 1500000000ULL
struct s9_task {
	volatile int ready;
	int err;
	uint64_t cpu_ns[2];
	int migrations, last_cpu;
};

struct s9_share {
	volatile uint32_t go;
	volatile uint64_t end_ns;
	struct s9_task t[S9_TASKS];
};

static void s9_child(struct s9_share *s, struct s9_task *t, int sleep_first)
{
	volatile uint64_t x = 1;
	uint64_t last, c;
	unsigned int cpu, prev = ~0U;
	int k;

	t->ready = 1;
	while (!s->go) {
		if (sleep_first)
			syscall(SYS_futex, &s->go, FUTEX_WAIT, 0, NULL, NULL, 0);
		else
			sched_yield();
	}
	last = cpu_ns();
	while (now_ns() < s->end_ns) {
		for (k = 0; k < 200; k++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		if (syscall(SYS_getcpu, &cpu, NULL, NULL) || cpu > 1) {
			t->err = EINVAL;
			break;
		}
		c = cpu_ns();
		t->cpu_ns[cpu] += c - last;
		last = c;
		if (prev != ~0U && cpu != prev)
			t->migrations++;
		prev = cpu;
	}
	t->last_cpu = prev;
	exit(0);
}

/* Returns the share of CPU 1 in percent, or -1 on a setup error. */
static int s9_run(int sleep_first, char *out, size_t len)
{
	struct s9_share *s = shared_alloc(sizeof(*s));
	pid_t pid[S9_TASKS] = { 0 };
	cpu_set_t both;
	uint64_t total[2] = { 0, 0 };
	int i, err = 0, migrations = 0, on[2] = { 0, 0 }, share1 = -1;

	make_fault_cfg(1000000UL);
	/* /init is pinned to CPU 0; the children inherit that. */
	for (i = 0; i < S9_TASKS && !err; i++) {
		pid[i] = fork();
		if (!pid[i])
			s9_child(s, &s->t[i], sleep_first);
		if (pid[i] < 0)
			err = -errno;
	}
	/*
	 * Wait until every child runs its waiting loop (and, for the wakeup
	 * run, sleeps), then become FIFO: from here on no child runs before
	 * all of them are set up.
	 */
	for (i = 0; i < S9_TASKS && !err; i++) {
		char path[64], buf[256], *p;
		int fd, n, waiting = 0;

		snprintf(path, sizeof(path), "/proc/%d/stat", pid[i]);
		while (!waiting) {
			usleep(1000);
			fd = open(path, O_RDONLY);
			n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
			if (fd >= 0)
				close(fd);
			if (n <= 0) {
				err = -ESRCH;
				break;
			}
			buf[n] = 0;
			p = strrchr(buf, ')');
			waiting = s->t[i].ready &&
				  (!sleep_first || (p && p[1] && p[2] == 'S'));
		}
	}
	if (!err)
		err = set_policy(0, SCHED_FIFO, 20);
	CPU_ZERO(&both);
	CPU_SET(0, &both);
	CPU_SET(1, &both);
	for (i = 0; i < S9_TASKS && !err; i++) {
		err = sra_write(pid[i], cfg_faults);
		if (!err)
			err = set_policy(pid[i], SCHED_SRA, 0);
		if (!err && sched_setaffinity(pid[i], sizeof(both), &both))
			err = -errno;
	}
	s->end_ns = now_ns() + S9_RUN_NS;
	s->go = 1;
	if (sleep_first)
		syscall(SYS_futex, &s->go, FUTEX_WAKE, S9_TASKS, NULL, NULL, 0);
	if (err) {
		for (i = 0; i < S9_TASKS; i++)
			if (pid[i] > 0)
				kill(pid[i], SIGKILL);
	}
	/* Sleeping as FIFO: back on CPU 0 as soon as the run is over. */
	for (i = 0; i < S9_TASKS; i++)
		if (pid[i] > 0)
			wait_child(pid[i]);
	set_policy(0, SCHED_OTHER, 0);
	for (i = 0; i < S9_TASKS; i++) {
		struct s9_task *t = &s->t[i];

		if (t->err && !err)
			err = -t->err;
		total[0] += t->cpu_ns[0];
		total[1] += t->cpu_ns[1];
		migrations += t->migrations;
		if (t->last_cpu == 0 || t->last_cpu == 1)
			on[t->last_cpu]++;
	}
	if (!err && total[0] + total[1] > 0)
		share1 = (int)(total[1] * 100 / (total[0] + total[1]));
	snprintf(out, len,
		 "%s: cpu0_ms=%llu cpu1_ms=%llu cpu1_share=%d%% tasks_last_on_cpu0/1=%d/%d migrations=%d err=%s",
		 sleep_first ? "wakeup" : "queued",
		 (unsigned long long)total[0] / 1000000,
		 (unsigned long long)total[1] / 1000000, share1, on[0], on[1],
		 migrations, err ? strerror(-err) : "none");
	munmap(s, sizeof(*s));
	return err ? -1 : share1;
}

static void scenario_placement(void)
{
	char queued[256], wakeup[256];
	int q = s9_run(0, queued, sizeof(queued));
	int w = s9_run(1, wakeup, sizeof(wakeup));

	result(q >= 35 && q <= 65 && w >= 35 && w <= 65, "sra-placement",
	       "tasks=%d run_ms=%llu min_share=35%%; %s; %s", S9_TASKS,
	       S9_RUN_NS / 1000000, queued, wakeup);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "exec-probe"))
		return exec_probe();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getpid() == 1) {
		mkdir("/proc", 0555);
		if (mount("proc", "/proc", "proc", 0, NULL))
			perror("mount /proc");
		mkdir("/sys", 0555);
		if (mount("sysfs", "/sys", "sysfs", 0, NULL))
			perror("mount /sys");
	}
	pin(0);
	{
		char cmdline[1024] = "";
		FILE *f = fopen("/proc/cmdline", "r");

		if (f) {
			if (!fgets(cmdline, sizeof(cmdline), f))
				cmdline[0] = 0;
			fclose(f);
		}
		strict_overhead = strstr(cmdline, "sra_strict_overhead=1") != NULL;
	}
	printf("SRA-TEST start\n");
	if (access("/proc/sched_sra", R_OK)) {
		result(0, "kernel", "no /proc/sched_sra: kernel without SCHED_SRA");
	} else {
		scenario_quota();
		scenario_cfs_runs();
		scenario_rt_preempts();
		scenario_switch_leak();
		scenario_errors();
		scenario_fork_exit();
		scenario_overhead();
		scenario_agent();
		scenario_placement();
	}
	printf("SRA-TEST done failures=%d\n", failures);
	fflush(stdout);
	if (getpid() == 1) {
		sync();
		reboot(RB_AUTOBOOT);
	}
	return failures ? 1 : 0;
}

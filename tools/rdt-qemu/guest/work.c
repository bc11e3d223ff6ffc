/*
 * Workloads of known footprint for the RDT machine's guest tests (tools/rdt-qemu).
 *
 *   rdt-work touch BYTES SECONDS       read one word per line of a BYTES buffer, over and over
 *   rdt-work thrash BYTES SECONDS      the same, writing (a buffer larger than the LLC evicts all)
 *   rdt-work stream RATE SECONDS BUF   read a BUF-byte buffer in order at RATE bytes/s
 *   rdt-work idle SECONDS              sleep
 *   rdt-work now                       print CLOCK_REALTIME in ns (cachescope's time_ns; the
 *                                      guest's busybox date has whole seconds only)
 *   rdt-work hold BYTES SECONDS        write and read a BYTES buffer once, then sleep keeping it
 *                                      (pushes every other line out of the LLC; the pages stay
 *                                      allocated, so the next workload's pages are not cached)
 *   rdt-work flush BYTES TASKS SECONDS write a BYTES buffer, CLFLUSH every line and MFENCE (as
 *                                      the kernel's CMT selftest does), move itself to the
 *                                      resctrl group whose tasks file is TASKS, read the buffer
 *                                      once and sleep keeping it: the lines are the new group's
 *   rdt-work ntstore BYTES PASSES SECONDS  write a BYTES buffer, CLFLUSH it, then write it
 *                                      PASSES times with non-temporal stores (MOVNTDQ, as glibc's
 *                                      memset above its threshold) and sleep: bandwidth, no lines
 *   rdt-work spin N                    a loop of N iterations of two instructions (DEC, JNZ),
 *                                      no memory access: two runs differ by exactly 2 x their
 *                                      difference in N in instructions retired at CPL 3
 *   rdt-work sample PERIOD N           spin N under an instructions counter of its own (CPL 3)
 *                                      that overflows every PERIOD: the PMU's interrupt makes the
 *                                      kernel write a sample each time; prints "samples=S lost=L
 *                                      throttles=T count=C" (C: the instructions counted). What
 *                                      `perf record` checks, without its 1e9 instructions of
 *                                      start and end, 20 to 35 s of a TCG guest
 *   rdt-work passes BYTES N            allocate a BYTES buffer as touch does, then read one
 *                                      word per line of it N times: two runs differ by
 *                                      (their difference in N) x BYTES / 64 line accesses
 *
 * With RDT_WORK_FLUSH=1, the buffer is flushed (CLFLUSH, MFENCE) once written and then read:
 * its lines are filled under the caller's RMID even where its pages were freed by another task
 * an instant ago and their lines are still cached as that task's (runc's init, before exec).
 * With RDT_WORK_STOP=1, touch, thrash and stream print "allocated" once their buffer is written
 * and read, and stop themselves (SIGSTOP) until continued: the caller can then push every line
 * out of the LLC, so that the lines the workload holds later are all lines it filled itself
 * (the kernel hands out recently freed pages first, whose lines may still be cached and belong
 * to whoever filled them). With RDT_WORK_PAUSE_MS=N, touch sleeps N ms after each pass (a service that is idle part of the
 * time, whose lines a busy neighbour can take). BYTES, RATE and BUF take K, M or G. Prints "ready" when warmed up (the buffer written and read
 * once, so that no dirty line of the set-up is left), then at the end one line with what it did:
 * "moved=N seconds=S start_ns=T0 end_ns=T1" for stream (which also ends early, as if its
 * time were up, on SIGTERM or SIGINT: a caller that needs it until something else is done) (bytes read after ready, over S seconds,
 * from T0 to T1 in CLOCK_REALTIME ns, the clock of cachescope's time_ns). With RDT_WORK_COUNTER=FILE
 * (a resctrl mbm_total_bytes file) stream also reads FILE just before and just after its window
 * and prints "counter_delta=N": the bytes the kernel counted over exactly that window. Stream
 * also prints "chunk=C marks_us=M1,M2,...": it reads C bytes at a time, and the i-th chunk was
 * read by start_ns + Mi µs; so the bytes it moved over any row's own interval are known, and a
 * test compares like with like however unevenly the guest's CPU was given to it.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <emmintrin.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define LINE 64

static volatile sig_atomic_t stop_stream;

static void on_stop(int sig)
{
	(void)sig;
	stop_stream = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t size_arg(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'G': v <<= 10; /* fall through */
	case 'M': v <<= 10; /* fall through */
	case 'K': v <<= 10; end++; break;
	}
	if (*end || v == 0) {
		fprintf(stderr, "rdt-work: '%s' is not a size (N, NK, NM, NG)\n", s);
		exit(2);
	}
	return v;
}

static volatile uint64_t sink;

/* The number in FILE (a resctrl counter), or -1 when it cannot be read or is not a number. */
static long long counter(const char *file)
{
	char text[64] = "";
	long long v = -1;
	FILE *f = file ? fopen(file, "r") : NULL;

	if (f) {
		if (fgets(text, sizeof(text), f) && sscanf(text, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static uint64_t pass(volatile uint8_t *buf, uint64_t bytes, int write)
{
	uint64_t i, sum = 0;

	for (i = 0; i < bytes; i += LINE) {
		if (write)
			buf[i] = (uint8_t)i;
		else
			sum += buf[i];
	}
	return sum;
}

/* Every line of the buffer out of the caches, written back where dirty. */
static void flush_all_lines(uint8_t *buf, uint64_t bytes)
{
	uint64_t i;

	for (i = 0; i < bytes; i += LINE)
		_mm_clflush(buf + i);
	_mm_mfence();
}

static uint8_t *buffer(uint64_t bytes)
{
	uint8_t *buf = aligned_alloc(4096, (bytes + 4095) & ~4095ULL);

	if (!buf) {
		fprintf(stderr, "rdt-work: cannot allocate %llu bytes\n", (unsigned long long)bytes);
		exit(1);
	}
	memset(buf, 1, bytes);	/* real pages, not the shared zero page */
	/* A page freed just before may still have its lines cached, charged to whoever freed it;
	 * stores to them hit and tag nothing. Flushed, the read below fills them as this task's. */
	if (getenv("RDT_WORK_FLUSH"))
		flush_all_lines(buf, bytes);
	sink += pass(buf, bytes, 0);
	if (getenv("RDT_WORK_STOP")) {
		printf("allocated\n");
		fflush(stdout);
		raise(SIGSTOP);
	}
	return buf;
}

/* Moves the calling process into the resctrl group whose tasks file is FILE. */
static void move_to(const char *file)
{
	FILE *f = fopen(file, "w");

	if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0) {
		fprintf(stderr, "rdt-work: cannot move into %s\n", file);
		exit(1);
	}
}

static void spin(uint64_t n)
{
	if (n)
		__asm__ volatile("1: dec %0\n\tjnz 1b" : "+r"(n) : : "cc");
}

/* Pages of the sample ring (a power of two), after its control page. */
#define RING_PAGES 8

static int sample(uint64_t period, uint64_t n)
{
	struct perf_event_attr a;
	struct perf_event_mmap_page *ctl;
	uint64_t head, tail, count = 0, samples = 0, lost = 0, throttles = 0;
	long page = sysconf(_SC_PAGESIZE);
	size_t size = (size_t)page * RING_PAGES;
	uint8_t *ring;
	int fd;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.type = PERF_TYPE_HARDWARE;
	a.config = PERF_COUNT_HW_INSTRUCTIONS;
	a.sample_period = period;
	a.sample_type = PERF_SAMPLE_IP;
	a.disabled = 1;
	a.exclude_kernel = 1;
	a.exclude_hv = 1;
	fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
	if (fd < 0) {
		perror("rdt-work: perf_event_open");
		return 1;
	}
	ctl = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ctl == MAP_FAILED) {
		perror("rdt-work: mmap of the sample ring");
		return 1;
	}
	ring = (uint8_t *)ctl + page;
	if (ioctl(fd, PERF_EVENT_IOC_RESET, 0) || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)) {
		perror("rdt-work: enabling the counter");
		return 1;
	}
	spin(n);
	if (ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) || read(fd, &count, sizeof(count)) != sizeof(count)) {
		perror("rdt-work: reading the counter");
		return 1;
	}
	head = __atomic_load_n(&ctl->data_head, __ATOMIC_ACQUIRE);
	/* Records are 8-byte aligned: a header never straddles the ring's end. */
	for (tail = ctl->data_tail; tail < head;) {
		struct perf_event_header h;
		uint64_t body[2] = { 0, 0 };
		size_t i;

		memcpy(&h, ring + tail % size, sizeof(h));
		if (h.size < sizeof(h))
			break;
		for (i = 0; i < sizeof(body) && sizeof(h) + i < h.size; i++)
			((uint8_t *)body)[i] = ring[(tail + sizeof(h) + i) % size];
		if (h.type == PERF_RECORD_SAMPLE)
			samples++;
		else if (h.type == PERF_RECORD_LOST)
			lost += body[1];
		else if (h.type == PERF_RECORD_THROTTLE)
			throttles++;
		tail += h.size;
	}
	printf("samples=%llu lost=%llu throttles=%llu count=%llu\n", (unsigned long long)samples,
	       (unsigned long long)lost, (unsigned long long)throttles, (unsigned long long)count);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "spin")) {
		spin(strtoull(argv[2], NULL, 10));
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "sample"))
		return sample(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
	if (argc == 4 && !strcmp(argv[1], "passes")) {
		uint64_t bytes = size_arg(argv[2]), n = strtoull(argv[3], NULL, 10), i;
		uint8_t *buf;

		unsetenv("RDT_WORK_STOP");
		buf = buffer(bytes);
		for (i = 0; i < n; i++)
			sink += pass(buf, bytes, 0);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "now")) {
		printf("%lld\n", realtime_ns());
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "idle")) {
		printf("ready\n");
		fflush(stdout);
		sleep(atoi(argv[2]));
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "hold")) {
		unsetenv("RDT_WORK_STOP");
		buffer(size_arg(argv[2]));
		printf("ready\n");
		fflush(stdout);
		sleep(atoi(argv[3]));
		return 0;
	}
	if (argc == 4 && (!strcmp(argv[1], "touch") || !strcmp(argv[1], "thrash"))) {
		uint64_t bytes = size_arg(argv[2]), passes = 0;
		int write = !strcmp(argv[1], "thrash");
		uint8_t *buf = buffer(bytes);
		double end = now() + atof(argv[3]);
		const char *pause = getenv("RDT_WORK_PAUSE_MS");
		useconds_t pause_us = pause ? (useconds_t)atoi(pause) * 1000 : 0;

		sink += pass(buf, bytes, write);
		printf("ready\n");
		fflush(stdout);
		while (now() < end) {
			sink += pass(buf, bytes, write);
			passes++;
			if (pause_us)
				usleep(pause_us);
		}
		printf("passes=%llu\n", (unsigned long long)passes);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "stream")) {
		uint64_t rate = size_arg(argv[2]), bytes = size_arg(argv[4]), moved = 0, off = 0;
		uint64_t chunk = 256 * 1024;
		uint8_t *buf = buffer(bytes);
		double seconds = atof(argv[3]), start, t;
		const char *file = getenv("RDT_WORK_COUNTER");
		long long before, after, start_ns, end_ns;
		/* One mark per chunk; the pacing never reads more than rate * seconds, plus one. */
		size_t max_marks = (size_t)(rate * seconds / chunk) + 2, marks = 0, i;
		long long *mark = calloc(max_marks, sizeof(*mark));

		if (!mark) {
			fprintf(stderr, "rdt-work: cannot allocate %zu marks\n", max_marks);
			return 1;
		}

		signal(SIGTERM, on_stop);
		signal(SIGINT, on_stop);
		printf("ready\n");
		fflush(stdout);
		before = counter(file);
		start = now();
		start_ns = realtime_ns();
		while ((t = now()) - start < seconds && !stop_stream) {
			double due = start + (double)moved / rate;

			if (t < due) {
				usleep((useconds_t)((due - t) * 1e6));
				continue;
			}
			if (off + chunk > bytes)
				off = 0;
			sink += pass(buf + off, chunk, 0);
			off += chunk;
			moved += chunk;
			if (marks < max_marks)
				mark[marks++] = (realtime_ns() - start_ns) / 1000;
		}
		t = now() - start;
		end_ns = realtime_ns();
		after = counter(file);
		printf("moved=%llu seconds=%.3f start_ns=%lld end_ns=%lld", (unsigned long long)moved, t,
		       start_ns, end_ns);
		if (file)
			printf(" counter_delta=%lld", before < 0 || after < 0 ? -1 : after - before);
		printf(" chunk=%llu marks_us=", (unsigned long long)chunk);
		for (i = 0; i < marks; i++)
			printf("%s%lld", i ? "," : "", mark[i]);
		printf("\n");
		free(mark);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "flush")) {
		uint64_t bytes = size_arg(argv[2]);
		uint8_t *buf;

		unsetenv("RDT_WORK_STOP");
		buf = buffer(bytes);
		pass(buf, bytes, 1);	/* every line dirty */
		flush_all_lines(buf, bytes);
		move_to(argv[3]);
		sink += pass(buf, bytes, 0);
		printf("ready\n");
		fflush(stdout);
		sleep(atoi(argv[4]));
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "ntstore")) {
		uint64_t bytes = size_arg(argv[2]) & ~63ULL, passes = strtoull(argv[3], NULL, 10), p, i;
		uint8_t *buf;
		__m128i v = _mm_set1_epi8(7);

		buf = buffer(bytes);
		flush_all_lines(buf, bytes);
		for (p = 0; p < passes; p++)
			for (i = 0; i < bytes; i += 16)
				_mm_stream_si128((__m128i *)(buf + i), v);
		_mm_sfence();
		printf("ready\nstored=%llu\n", (unsigned long long)(bytes * passes));
		fflush(stdout);
		sleep(atoi(argv[4]));
		return 0;
	}
	fprintf(stderr, "usage: rdt-work touch|thrash|hold BYTES SECONDS | stream RATE SECONDS BUF | idle SECONDS | now"
		" | flush BYTES TASKS SECONDS | ntstore BYTES PASSES SECONDS\n");
	return 2;
}

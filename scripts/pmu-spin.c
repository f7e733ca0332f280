/*
 * pmu-spin: a process whose user-mode instruction count is known exactly.
 *
 *   pmu-spin N   runs N iterations of an 8-instruction loop and exits 0.
 *
 * No C library: _start parses N and calls the loop, so the user-mode
 * instructions are 8*N plus a fixed start-up (argument parsing: a few
 * instructions per digit, under 200 in all). The loop is inline assembly, so
 * no compiler can change it. Built by scripts/pmu-guest (aarch64) and by
 * scripts/hw-validate known-answers (the host's architecture):
 *   cc -static -nostdlib -ffreestanding -fno-stack-protector -O1 -o pmu-spin pmu-spin.c
 * Used by scripts/pmu-guest-checks; see docs/hardware-validation.md.
 */
#define PER_ITER 8

static unsigned long parse(const char *s)
{
	unsigned long n = 0;
	while (*s >= '0' && *s <= '9')
		n = n * 10 + (unsigned long)(*s++ - '0');
	return n;
}

static void spin(unsigned long n)
{
	if (n == 0)
		return;
#if defined(__aarch64__)
	/* 6 adds + subs + b.ne = 8 instructions per iteration */
	__asm__ volatile(
		"1:\n\t"
		"add x9, x9, #1\n\tadd x10, x10, #1\n\tadd x11, x11, #1\n\t"
		"add x12, x12, #1\n\tadd x13, x13, #1\n\tadd x14, x14, #1\n\t"
		"subs %0, %0, #1\n\t"
		"b.ne 1b\n"
		: "+r"(n) : : "x9", "x10", "x11", "x12", "x13", "x14", "cc");
#elif defined(__x86_64__)
	/* 6 adds + dec + jnz = 8 instructions per iteration */
	__asm__ volatile(
		"1:\n\t"
		"add $1, %%r8\n\tadd $1, %%r9\n\tadd $1, %%r10\n\t"
		"add $1, %%r11\n\tadd $1, %%rsi\n\tadd $1, %%rdi\n\t"
		"dec %0\n\t"
		"jnz 1b\n"
		: "+r"(n) : : "r8", "r9", "r10", "r11", "rsi", "rdi", "cc");
#else
#error "pmu-spin: aarch64 or x86_64 only"
#endif
}

static __attribute__((noreturn)) void sys_exit(long code)
{
#if defined(__aarch64__)
	register long x0 __asm__("x0") = code;
	register long x8 __asm__("x8") = 93; /* exit */
	__asm__ volatile("svc 0" : : "r"(x0), "r"(x8) : "memory");
#else
	__asm__ volatile("syscall" : : "a"(60L), "D"(code) : "rcx", "r11", "memory");
#endif
	__builtin_unreachable();
}

__attribute__((used, noreturn)) void pmu_spin_main(long *sp)
{
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	spin(argc > 1 ? parse(argv[1]) : 0);
	sys_exit(0);
}

#if defined(__aarch64__)
__asm__(".text\n.globl _start\n_start:\n\tmov x0, sp\n\tbl pmu_spin_main\n");
#else
__asm__(".text\n.globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall pmu_spin_main\n");
#endif

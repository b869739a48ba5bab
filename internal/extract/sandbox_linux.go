package extract

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// childAttr is the child's process attributes: the kernel kills it when
// the thread that started it ends (see startAndWait).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// nobody is the user a child started by root runs as.
const nobody = 65534

// childThreads is how many threads beyond those its user runs already a
// child may start (RLIMIT_NPROC counts a user's threads, all processes
// together); a Go child with GOMAXPROCS=1 runs about 6.
const childThreads = 128

// lockdown applies the child's sandbox to its own process, before it reads
// its input:
//   - the Go runtime's limits (limitGo);
//   - started by root, it becomes nobody, without supplementary groups or
//     capabilities (a root without the capabilities to do so stays root);
//   - rlimits: CPU seconds (SIGXCPU, then SIGKILL a second later), memory
//     (RLIMIT_DATA, not under the race detector), no file written
//     (RLIMIT_FSIZE 0: its stdout and stderr are pipes), no core dump, no
//     locked memory or message queues, 16 descriptors, and its user's
//     threads now plus childThreads;
//   - not dumpable, no new privileges, and the seccomp filter of
//     childPolicy, on every thread.
//
// It returns an error when any step fails: the child must not read a file
// without its sandbox.
func lockdown(cpuSeconds int, memory int64) error {
	limitGo(memory)
	if os.Getuid() == 0 {
		if err := becomeNobody(); err != nil && !errors.Is(err, syscall.EPERM) {
			return err
		}
	}
	threads, err := userThreads(os.Getuid())
	if err != nil {
		return err
	}
	cpu := uint64(cpuSeconds)
	limits := []struct {
		resource int
		cur, max uint64
	}{
		{unix.RLIMIT_CPU, cpu, cpu + 1},
		{unix.RLIMIT_FSIZE, 0, 0},
		{unix.RLIMIT_CORE, 0, 0},
		{unix.RLIMIT_MEMLOCK, 0, 0},
		{unix.RLIMIT_MSGQUEUE, 0, 0},
		{unix.RLIMIT_NOFILE, 16, 16},
		{unix.RLIMIT_NPROC, uint64(threads + childThreads), uint64(threads + childThreads)},
	}
	if !raceEnabled && memory > 0 {
		limits = append(limits, struct {
			resource int
			cur, max uint64
		}{unix.RLIMIT_DATA, uint64(memory), uint64(memory)})
	}
	for _, l := range limits {
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: l.cur, Max: l.max}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.resource, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	return seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: childPolicy()})
}

// becomeNobody makes the process nobody, without supplementary groups. It
// fails with EPERM for a root without the capabilities to change users,
// which stays root: the seccomp filter still holds it.
func becomeNobody() error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(nobody); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(nobody); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	return nil
}

// userThreads returns the threads of the processes of user uid (its real
// user), from /proc.
func userThreads(uid int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := strconv.Itoa(uid)
	total := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone since
		}
		var real, threads string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				real, _, _ = strings.Cut(strings.TrimSpace(rest), "\t")
			} else if rest, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
				threads = strings.TrimSpace(rest)
			}
		}
		f.Close()
		if real == want {
			n, _ := strconv.Atoi(threads)
			total += n
		}
	}
	return total, nil
}

// childPolicy is the child's seccomp filter: the system calls the Go
// runtime (with or without cgo, with or without the race detector) makes
// once started, on the files it already holds; anything else fails with
// EPERM: opening, creating or removing any file, sockets, exec, fork,
// ptrace, signals to another process, and the rest. Memory is never mapped
// executable; clone makes threads only; clone3, whose flags a filter
// cannot read, fails with ENOSYS, on which glibc falls back to clone.
func childPolicy() seccomp.Policy {
	pid := uint64(os.Getpid())
	noExec := seccomp.ArgumentConditions{{Argument: 2, Operation: seccomp.BitsNotSet, Value: unix.PROT_EXEC}}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionErrno,
		Syscalls: []seccomp.SyscallGroup{
			{
				Action: seccomp.ActionAllow,
				Names: []string{
					// Its pipes.
					"read", "write", "close", "fstat", "fcntl",
					// Memory.
					"munmap", "madvise", "brk",
					// Threads, scheduling, time.
					"futex", "sched_yield", "sched_getaffinity", "nanosleep", "clock_nanosleep",
					"clock_gettime", "gettimeofday", "restart_syscall", "set_robust_list", "rseq",
					"getpid", "gettid", "exit", "exit_group",
					// Signals, the Go scheduler's preemption among them.
					"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
					// The Go runtime's poller.
					"epoll_create1", "epoll_ctl", "epoll_pwait", "eventfd2",
					"getrandom",
				},
				NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "mmap", Conditions: noExec},
					{Name: "mprotect", Conditions: noExec},
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD}}},
					{Name: "tgkill", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: pid}}},
					{Name: "kill", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: pid}}},
				},
			},
			{
				Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS),
				Names:  []string{"clone3"},
			},
		},
	}
}

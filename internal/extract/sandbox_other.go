//go:build !linux

package extract

import "syscall"

// childAttr is the child's process attributes: none beyond the defaults
// here (no parent-death signal outside Linux).
func childAttr() *syscall.SysProcAttr { return nil }

// lockdown applies what of the child's sandbox this system has: the Go
// runtime's limits and the CPU and memory rlimits. The seccomp filter,
// the parent-death signal and the other bounds are Linux's (see
// sandbox_linux.go).
func lockdown(cpuSeconds int, memory int64) error {
	limitGo(memory)
	cpu := uint64(cpuSeconds)
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu + 1}); err != nil {
		return err
	}
	if !raceEnabled && memory > 0 {
		m := uint64(memory)
		return syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: m, Max: m})
	}
	return nil
}
